"""The values that cross the GatewayCore boundary: a request and its entry (a backend's
observation, `BackendState`, lives with the fleet: `core.fleet.state`).

Kept apart from the core so the queue and the policies can share them without a cycle;
`burstguard.core.gateway.core` re-exports `GatewayRequest` and `BackendState` (the contract).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from burstguard.core.gateway.config import ClassConfig


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class GatewayRequest:
    """What the gateway knows about a request when it arrives (times in seconds)."""

    id: str
    arrival_s: float
    prompt_tokens: int
    max_tokens: int | None
    priority_class: str | None = None
    tenant: str | None = None
    route: str | None = None  # e.g. "/v1/chat/completions" or the model name: predictor key
    resumable: bool = True  # the shell can continue it after a preemption (a token-id
    # prompt's stream cannot be continued with text: its class's preemptions skip it)
    prefix_hashes: tuple[int, ...] = ()  # its prompt's leading block hashes (prefix affinity)
    key_id: str | None = None  # its API key's id (`quota.key_id`), for a key's own quota
    # the backends it may go to (a Gateway API gateway's subset hint); None: any. While
    # none of them has room it waits, and so does what is queued behind it in order
    allowed: frozenset[str] | None = None
    stream: bool = True  # answered as a stream (False: silent until whole: its deadline
    # covers the whole answer, `config.DeadlineConfig`)

    def __init__(
        self,
        id: str,
        arrival_s: float,
        prompt_tokens: int,
        max_tokens: int | None,
        priority_class: str | None = None,
        tenant: str | None = None,
        route: str | None = None,
        resumable: bool = True,
        prefix_hashes: tuple[int, ...] = (),
        key_id: str | None = None,
        allowed: frozenset[str] | None = None,
        stream: bool = True,
    ) -> None:
        self.id = id
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.priority_class = priority_class
        self.tenant = tenant
        self.route = route
        self.resumable = resumable
        self.prefix_hashes = prefix_hashes
        self.key_id = key_id
        self.allowed = allowed
        self.stream = stream


@dataclass(slots=True, eq=False, init=False)  # (init=False: see `perf_model.BatchShape`)
class Entry:
    """A request inside the gateway with what the gateway decided about it."""

    req: GatewayRequest
    cls: ClassConfig
    tenant: str
    predicted_output: int
    seq: int
    key: float = 0.0  # ordering key within its class (lower first)
    alive: bool = True  # False once it left the queue (lazy deletion from heaps/deques)
    released_at: float | None = None  # last release to the backend
    first_token_at: float | None = None  # the client's first token (once, across resumes)
    preemptions: int = 0  # > 0: it was preempted (see `holds_answer`)
    resumes: bool = False  # queued again after its answer began: its next release resumes it
    charged: int = 0  # predicted tokens charged to its tenant's fairness (once, at a release)
    backend: str | None = None  # where its last release sent it
    work: int = 0  # prefill tokens counted ahead on that backend until its first token there
    ahead: int = 0  # prefill tokens ahead of it on that backend when it was sent there
    armed: int = 0  # bumped at each release: an older deadline on the heap is stale
    cut_at: float = 0.0  # its deadline (`GatewayCore._watch`); inf: none
    progress_at: float | None = None  # its stream's last progress since its last release
    cost: int = field(init=False)
    """Tokens it holds in the budget: prompt + predicted output (read a dozen times per
    request, so stored: neither part changes)."""

    def __init__(
        self,
        req: GatewayRequest,
        cls: ClassConfig,
        tenant: str,
        predicted_output: int,
        seq: int,
        key: float = 0.0,
        alive: bool = True,
        released_at: float | None = None,
        first_token_at: float | None = None,
        preemptions: int = 0,
        resumes: bool = False,
        charged: int = 0,
        backend: str | None = None,
        work: int = 0,
        ahead: int = 0,
        armed: int = 0,
        cut_at: float = 0.0,
        progress_at: float | None = None,
    ) -> None:
        self.req = req
        self.cls = cls
        self.tenant = tenant
        self.predicted_output = predicted_output
        self.seq = seq
        self.key = key
        self.alive = alive
        self.released_at = released_at
        self.first_token_at = first_token_at
        self.preemptions = preemptions
        self.resumes = resumes
        self.charged = charged
        self.backend = backend
        self.work = work
        self.ahead = ahead
        self.armed = armed
        self.cut_at = cut_at
        self.progress_at = progress_at
        self.cost = req.prompt_tokens + predicted_output

    @property
    def holds_answer(self) -> bool:
        """Its client holds part of the answer (it was preempted, or queued again after its
        backend failed or its lease was refused mid-answer): back in the queue, it can only
        be resumed or ended in-band, never shed with a 429."""
        return self.preemptions > 0 or self.resumes
