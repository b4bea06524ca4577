"""The GatewayCore's driver protocol: the events a shell feeds it and the effects it returns.

A shell (the live server, the simulator) owns no scheduling decision: it turns what
happens (a request read, a tick, a scrape, a first token, an upstream's end) into one of
these events, hands it to `GatewayCore.handle`, and carries out the effects in order.
Each effect names the request it concerns; a shell that does not know the id (a client
already gone) ignores it.

Events and effects are values nobody changes after building them, but not `frozen`: they
are built per request, and mypyc compiles only a written `__init__` (see
`core.engine.perf_model.BatchShape`); the same holds for `GatewayRequest`, `Entry`,
`BackendState` and the router's `RouteRequest` and `BackendView`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.quota import BucketCharge, Verdict
from burstguard.core.gateway.request import GatewayRequest
from burstguard.wire.outcomes import Reason

# -- events: what happened ----------------------------------------------------------------


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Arrive:
    """A request was read whole and validated. `quota`: its quota already charged by the
    shell in the shared store (`GatewayCore.quota_plan`'s plan, through Redis); None: the
    core charges its own buckets, each at 1/`quota_share` of its rate and burst (a gateway
    replica's share while the shared store is unreachable)."""

    req: GatewayRequest
    quota: Verdict | None = None
    quota_share: int = 1

    def __init__(
        self, req: GatewayRequest, quota: Verdict | None = None, quota_share: int = 1
    ) -> None:
        self.req = req
        self.quota = quota
        self.quota_share = quota_share


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Tick:
    """The periodic tick (`TICK_S`): expire queue deadlines, check the backend deadlines
    (`config.DeadlineConfig`), release what fits. `progressed`: requests in flight whose
    backend sent something since the shell last said (or whose client holds the stream
    paused: its silence is not the backend's); a shell says so at least every
    `PROGRESS_S` wall seconds, on any tick."""

    progressed: Collection[str] = ()

    def __init__(self, progressed: Collection[str] = ()) -> None:
        self.progressed = progressed


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Scrape:
    """`backend`'s metrics were read (`backend`: its URL, the fleet's name for it)."""

    state: BackendState
    backend: str

    def __init__(self, state: BackendState, backend: str) -> None:
        self.state = state
        self.backend = backend


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class FirstToken:
    """The client received the request's first output token."""

    request_id: str

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Finish:
    """The request completed; `output_tokens`: what the client received in all."""

    request_id: str
    output_tokens: int

    def __init__(self, request_id: str, output_tokens: int) -> None:
        self.request_id = request_id
        self.output_tokens = output_tokens


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Cancel:
    """The client went away; `output_tokens`: what it had received (None: unknown), which
    its quota is charged."""

    request_id: str
    output_tokens: int | None = None

    def __init__(self, request_id: str, output_tokens: int | None = None) -> None:
        self.request_id = request_id
        self.output_tokens = output_tokens


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Fail:
    """The backend failed the request (an error went to the client); `output_tokens`: what
    its client had received (None: unknown), which its quota is charged."""

    request_id: str
    output_tokens: int | None = None

    def __init__(self, request_id: str, output_tokens: int | None = None) -> None:
        self.request_id = request_id
        self.output_tokens = output_tokens


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class BackendFailed:
    """The request's backend failed it: `reason` is one of `fleet.FAILURE_REASONS`
    (connect, reset, status_5xx, timeout, bad_answer: a 200 that is not JSON). `started`:
    its client already holds part of the answer (then only a resumable request may go on
    elsewhere). The core answers with a `Release` to another backend (failover), by
    queueing it again, or with `Abandon`."""

    request_id: str
    reason: str
    started: bool = False

    def __init__(self, request_id: str, reason: str, started: bool = False) -> None:
        self.request_id = request_id
        self.reason = reason
        self.started = started


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class LeaseRefused:
    """The shared in-flight lease on the request's backend was refused (other gateway
    replicas hold its cap): the request was not sent; the core queues it again."""

    request_id: str

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class FleetService:
    """What the other gateway replicas served since the last sync (through Redis): tokens
    per class and tenant, for the tenants `GatewayCore.fairness_tenants` named. VTC counts
    them, so a tenant's counter is its service over the whole fleet."""

    served: Mapping[str, Mapping[str, float]]

    def __init__(self, served: Mapping[str, Mapping[str, float]]) -> None:
        self.served = served


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Drain:
    """The gateway is stopping (SIGTERM) and its drain ends at `until` (the core's clock):
    nothing new is admitted (503 shutdown), what is queued and is not predicted to finish
    by then is answered 503 shutdown with a Retry-After (an answer already started ends
    with an in-band error), and at `until` what is still in flight is cut (`Abort` with
    no failure, then `Abandon(shutdown)`). Sent again with `until` = now, it cuts at once."""

    until: float

    def __init__(self, until: float) -> None:
        self.until = until


Event = (
    Arrive | Tick | Scrape | FirstToken | Finish | Cancel | Fail | BackendFailed | LeaseRefused
    | FleetService | Drain
)  # fmt: skip


# -- effects: what to do ------------------------------------------------------------------


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Release:
    """Send the request to `backend` now (the router's pick). `priority`: vLLM's `priority`
    field to set (None: leave it out; set only for a backend that forwards it).
    `resumed`: it was preempted (or its backend failed after its first token) before;
    continue it where the client is. `failover`: a resend after its backend failed."""

    req: GatewayRequest
    backend: str
    priority: int | None = None
    resumed: bool = False
    failover: bool = False
    quota: Verdict | None = None  # its quota's buckets after its admission (headers)

    def __init__(
        self,
        req: GatewayRequest,
        backend: str,
        priority: int | None = None,
        resumed: bool = False,
        failover: bool = False,
        quota: Verdict | None = None,
    ) -> None:
        self.req = req
        self.backend = backend
        self.priority = priority
        self.resumed = resumed
        self.failover = failover
        self.quota = quota


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Reject:
    """Answer 429 with this Retry-After (seconds of the core's clock). `reason`: queue_full,
    deadline (at admission or expired in the queue), evicted, no_backend (every backend
    down longer than `fleet.health.max_outage_wait_s`), or quota_exceeded (its tenant's
    bucket: the Retry-After is exact, infinite when its cost exceeds the burst)."""

    req: GatewayRequest
    reason: Reason
    retry_after_s: float
    quota: Verdict | None = None  # reason quota: the refusal; else the buckets (headers)

    def __init__(
        self,
        req: GatewayRequest,
        reason: Reason,
        retry_after_s: float,
        quota: Verdict | None = None,
    ) -> None:
        self.req = req
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.quota = quota


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Preempt:
    """Close the request's upstream connection (the engine aborts it and frees its KV).
    `resume`: keep its client; the core requeued it and will `Release` it again
    (`resumed`). Not `resume` (`GatewayCore(preempt_ends=True)`, a request that cannot be
    continued): end its client's answer with a retryable error (`Reason.PREEMPTED`); the
    core counted it preempted and failed, and nothing more about it follows."""

    req: GatewayRequest
    resume: bool = True

    def __init__(self, req: GatewayRequest, resume: bool = True) -> None:
        self.req = req
        self.resume = resume


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Abandon:
    """Its backend failed it and it cannot go on (`outcome`: not_retryable, budget,
    no_backend): answer the client with an error (in-band if its answer has started)."""

    req: GatewayRequest
    outcome: str

    def __init__(self, req: GatewayRequest, outcome: str) -> None:
        self.req = req
        self.outcome = outcome


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Abort:
    """Close the request's upstream and keep its client: its backend held it silent past
    its deadline, or the backend's circuit opened (`failure` says which; its status and
    error are what the client gets if nothing follows). The core's next effect about it
    (in the same answer) says what follows: a `Release` to another backend (resumed when
    its client holds tokens), or an `Abandon`; or it waits in the queue again."""

    req: GatewayRequest
    failure: Failure | None  # None: the gateway's drain ended (reason shutdown)

    def __init__(self, req: GatewayRequest, failure: Failure | None) -> None:
        self.req = req
        self.failure = failure


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Circuit:
    """`backend`'s circuit breaker changed state (for the log). (No request: `req` None.)"""

    backend: str
    state: str  # closed, open, half_open
    req: None = None

    def __init__(self, backend: str, state: str, req: None = None) -> None:
        self.backend = backend
        self.state = state
        self.req = req


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Forget:
    """`backend` drained and left the fleet: stop its scraper. (No request: `req` None.)"""

    backend: str
    req: None = None

    def __init__(self, backend: str, req: None = None) -> None:
        self.backend = backend
        self.req = req


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class Settle:
    """Settle the request's quota in the shared store (it was charged there): give each
    bucket its amount back (negative: charge it). The core settles its own buckets
    itself."""

    req: GatewayRequest
    amounts: tuple[tuple[BucketCharge, float], ...]

    def __init__(
        self, req: GatewayRequest, amounts: tuple[tuple[BucketCharge, float], ...]
    ) -> None:
        self.req = req
        self.amounts = amounts


Effect = Release | Reject | Preempt | Abort | Abandon | Circuit | Forget | Settle
