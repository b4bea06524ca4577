"""GatewayCore: the gateway's decisions as a pure state machine (one core, two clocks).

The asyncio server drives it with the real clock, `burstguard sim --gateway` with a
virtual one, both through one protocol: `handle(event, now)` returns the effects to carry
out (`core.gateway.events`), so no shell decides when to release, shed, expire or preempt.
Nothing here reads a clock or awaits. A request that arrives ends in exactly one outcome —
completed, rejected (at once, evicted or past its deadline), cancelled, or failed — and
`stats` counts them by class.

Release is work-conserving: a class may fill every free slot while no better class
waits; its `max_in_flight_fraction` counts only its own requests in flight, and a
request past its class's aging bound (`max_wait_s`) is released even when that cap would
refuse it. A class with a guaranteed share (`min_in_flight_fraction`) goes ahead of
better classes while its own requests in flight are below that share of the request cap,
and is not preempted below it: a sustained overload of a better class cannot starve it.
Filling free slots with long batch jobs would leave a burst after an idle gap
no slot (vLLM frees a slot only when a request ends: it preempts for KV blocks, never for
a slot), so the gateway preempts itself: when a request of a better class waits and no
slot is free, the in-flight request of a `preemptible` class that has produced the
fewest tokens is preempted (`Preempt`: the shell closes its upstream, the engine frees
its KV) and requeued at its original arrival; its later `Release` is marked `resumed`,
and the shell continues the client's answer where it stopped. In continuous batching
every running request decodes one token per step, so "fewest tokens" is "latest first
token" (none yet: fewest of all), which the core knows from `FirstToken` events alone.

`handle` is the only way in. Routing is a decision of the core too: it always has a
`Fleet` (the live gateway's discovered backends, the simulator's replicas), each
`Release` names the backend the fleet's router picked, and a request is released only
while some routable backend is below its in-flight cap. The fleet is the one owner of
per-backend load; each backend has its own adaptive request cap (`InFlightLimits` fed by
that backend's `Scrape` and the fleet's load, at most `max_in_flight_per_backend`),
handed to the fleet with `Fleet.set_cap`; the gateway-wide caps (`max_in_flight`, the
token budget) still bound the total, and adapt from the backend's metrics only while
there is one backend. Each backend's switches (`resume`: it may be preempted and a
started stream may fail over; `forward_priority`) are read from its own settings
(`GatewayConfig.backend_config`: a static entry or discovery's options). A
`BackendFailed` goes to `Fleet.on_failure`: a request whose client has nothing yet (or
that can be resumed) is released to another backend at once (`Release(failover=True)`),
queued again at its place when the others are at their caps, or abandoned (`Abandon`)
when the retry budget or the fleet says no. `LeaseRefused` (another gateway replica
holds the backend's shared cap) queues it again and holds that backend at its current
load for one tick. The fleet's clock is wall seconds: the core hands it `now /
engine_speedup`, so health and budget windows mean the same live and simulated.
`FleetService` (what the other gateway replicas served each tenant, read from Redis by
the shell) goes to the fairness policy, so VTC orders by service over the whole fleet.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.router import RouteRequest
from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.admission import (
    ClassInflow,
    InFlightLimits,
    ServiceRate,
    estimate_wait,
)
from burstguard.core.gateway.config import BackendConfig, ClassConfig, GatewayConfig
from burstguard.core.gateway.events import (
    Abandon,
    Abort,
    Arrive,
    BackendFailed,
    Cancel,
    Circuit,
    Drain,
    Effect,
    Event,
    Fail,
    Finish,
    FirstToken,
    FleetService,
    Forget,
    LeaseRefused,
    Preempt,
    Reject,
    Release,
    Scrape,
    Settle,
    Tick,
)
from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.policies import Picker, order_key
from burstguard.core.gateway.predictor import OutputPredictor
from burstguard.core.gateway.queue import OVERFLOW_TENANT, ClassQueue, GatewayQueue
from burstguard.core.gateway.quota import Plan, Quotas, Verdict, settle_amounts
from burstguard.core.gateway.request import Entry, GatewayRequest
from burstguard.wire.outcomes import Outcome, Reason

__all__ = ["BackendState", "GatewayCore", "GatewayRequest", "GatewayStats"]

# how often a driver (the live server, the simulator) sends `Tick`, in wall seconds
TICK_S = 0.05
# a driver says which requests progressed (`Tick.progressed`) at least this often (wall s)
PROGRESS_S = 0.25
_LEARN = 0.2  # EWMA weight of one sample of a backend's prefill time per token
_OUTCOMES = tuple(Outcome)  # (iterating the enum class is interpreted code: `stats` is hot)


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class _Admission:
    """An arrival accepted into the queue, or rejected with a reason and a Retry-After.

    `evicted` are queued requests shed to make room (answer each with 429). Reasons:
    `deadline` (cannot start before the class's queue deadline), `queue_full`,
    `no_backend` (every backend down too long, see `_outage`).
    """

    accepted: bool
    reason: Reason | None = None
    retry_after_s: float | None = None
    evicted: tuple[GatewayRequest, ...] = ()

    def __init__(
        self,
        accepted: bool,
        reason: Reason | None = None,
        retry_after_s: float | None = None,
        evicted: tuple[GatewayRequest, ...] = (),
    ) -> None:
        self.accepted = accepted
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.evicted = evicted


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class GatewayStats:
    """A snapshot for /metrics: queue, in flight, limits, rate and outcome counters."""

    queue_depth: dict[str, int]
    queue_tokens: dict[str, int]
    in_flight_requests: int
    in_flight_tokens: int
    limit_requests: float
    limit_tokens: float  # math.inf: no token budget
    service_rate: float | None
    outcomes: dict[str, dict[str, int]]  # class -> outcome -> count
    rejections: dict[Reason, int]  # reason -> count
    ttft_slo: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (met, seen)
    preemptions: dict[str, int] = field(default_factory=dict)  # class -> count
    fairness_tenants: dict[str, int] = field(default_factory=dict)  # class -> tenants tracked
    tenant_overflow: dict[str, int] = field(default_factory=dict)  # class -> queued as ~overflow
    quota_buckets: int = 0  # local quota buckets held (bounded by quotas.max_buckets)

    def __init__(
        self,
        queue_depth: dict[str, int],
        queue_tokens: dict[str, int],
        in_flight_requests: int,
        in_flight_tokens: int,
        limit_requests: float,
        limit_tokens: float,
        service_rate: float | None,
        outcomes: dict[str, dict[str, int]],
        rejections: dict[Reason, int],
        ttft_slo: dict[str, tuple[int, int]] | None = None,
        preemptions: dict[str, int] | None = None,
        fairness_tenants: dict[str, int] | None = None,
        tenant_overflow: dict[str, int] | None = None,
        quota_buckets: int = 0,
    ) -> None:
        self.queue_depth = queue_depth
        self.queue_tokens = queue_tokens
        self.in_flight_requests = in_flight_requests
        self.in_flight_tokens = in_flight_tokens
        self.limit_requests = limit_requests
        self.limit_tokens = limit_tokens
        self.service_rate = service_rate
        self.outcomes = outcomes
        self.rejections = rejections
        self.ttft_slo = {} if ttft_slo is None else ttft_slo
        self.preemptions = {} if preemptions is None else preemptions
        self.fairness_tenants = {} if fairness_tenants is None else fairness_tenants
        self.tenant_overflow = {} if tenant_overflow is None else tenant_overflow
        self.quota_buckets = quota_buckets


class GatewayCore:
    """Queue, order, admit, shed and preempt; see the module docstrings of the parts."""

    def __init__(
        self, config: GatewayConfig, fleet: Fleet | None = None, preempt_ends: bool = False
    ) -> None:
        """`fleet`: the backends to route over, which the shell keeps listing (None: one
        made of `config.backends`). `preempt_ends`: a preemptible request that cannot be
        resumed (its backend does not resume, or its shell cannot: the Endpoint Picker) may
        still be preempted, and is then ended (`Preempt(resume=False)`, failed) instead of
        requeued."""
        self.config = config
        self._preempt_ends = preempt_ends
        self.fleet = fleet if fleet is not None else Fleet(config.fleet, config.backend_urls())
        self._fleet_scale = 1.0 / config.engine_speedup  # core clock -> the fleet's wall clock
        per_backend = config.admission.max_in_flight_per_backend or config.admission.max_in_flight
        self._backend_adm = config.admission.model_copy(
            update={
                "max_in_flight": per_backend,
                "min_in_flight": min(config.admission.min_in_flight, per_backend),
            }
        )
        self._backend_limits: dict[str, InFlightLimits] = {}
        self._backend_states: dict[str, BackendState] = {}
        self._options: dict[str, BackendConfig] = {}  # url -> its settings (cached)
        self._held: dict[str, float] = {}  # backend -> until when a refused lease holds it
        self._forgotten: list[str] = []
        self._now = 0.0
        self._adm = config.admission
        self._queue = GatewayQueue(config.classes)
        self._picker = Picker(config.policy, self._queue, config.limits.max_idle_tenants)
        self._predictor = OutputPredictor(config.predictor)
        self._rate = ServiceRate(self._adm.rate_half_life_s, self._adm.initial_service_rate)
        interval = config.scrape_interval_s * config.engine_speedup  # in the core's clock
        self._limits = InFlightLimits(self._adm, interval)
        self._inflow = ClassInflow(self._adm.rate_half_life_s)
        self._shares = any(c.min_in_flight_fraction for c in config.classes)
        self._backend: BackendState | None = None  # the sole backend's state
        self._queued: dict[str, Entry] = {}
        self._in_flight: dict[str, Entry] = {}
        self._in_flight_tokens = 0
        self._class_requests = Counter[str]()  # in flight, per class
        self._class_tokens = Counter[str]()
        self._preemptible: dict[str, Entry] = {}  # in flight, of a preemptible class
        self._seq = 0
        self._outcomes = {c.name: Counter[Outcome]() for c in config.classes}
        self._rejections = Counter[Reason]()
        self._preemptions = Counter[str]()
        self._overflowed = Counter[str]()  # requests queued as OVERFLOW_TENANT, per class
        self._ttft: dict[str, list[int]] = {c.name: [0, 0] for c in config.classes}
        self._return_at = {c.name: -math.inf for c in config.classes}  # see _schedule_return
        self._outage_since: float | None = None  # the fleet's clock; see _outage
        self.quotas = Quotas(config.quotas, config.api_keys, config.predictor.default_max_tokens)
        self._quota_on = self.quotas.enabled
        self._charged: dict[str, tuple[Plan, Verdict, int]] = {}  # id -> plan, verdict, share
        self._settles: list[Effect] = []
        self._dl = config.backend_deadlines
        self._deadlines: list[tuple[float, int, int, str]] = []  # (cut_at, seq, armed, id)
        self._ahead = Counter[str]()  # backend -> prefill tokens sent, no first token yet
        self._prefill_spt: dict[str, float] = {}  # backend -> learned s per prefill token
        self._drain_until: float | None = None  # the gateway stops: its drain's end

    # -- the driver protocol ----------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Effect]:
        """Applies `event` at `now`; the effects to carry out, in order."""
        out: list[Effect] = []
        self._now = now
        if isinstance(event, Arrive):
            if self._drain_until is not None:  # stopping: another replica will take it
                cls = self.config.class_by_name(event.req.priority_class)
                self._outcomes[cls.name][Outcome.REJECTED] += 1
                self._rejections[Reason.SHUTDOWN] += 1
                out.append(Reject(event.req, Reason.SHUTDOWN, self._adm.min_retry_after_s))
                return out
            if self._quota_on and (refused := self._quota_admit(event, now)) is not None:
                out.append(refused)
                return out
            adm = self._submit(event.req, now)
            out += (self._shed(v, Reason.EVICTED, now) for v in adm.evicted)
            if not adm.accepted:
                assert adm.reason is not None and adm.retry_after_s is not None
                charged = self._quota_settle(event.req.id, now, None, ran=False)
                out.append(Reject(event.req, adm.reason, adm.retry_after_s, charged))
                out += self._settles
                self._settles.clear()
                return out
        elif isinstance(event, Tick):
            out += (self._shed(r, Reason.DEADLINE, now) for r in self._expire(now))
            if self._dl.enabled:
                self._progressed(event.progressed, now)
                self._check_deadlines(now, out)
            self._circuits(now, out)
            if self._outage(now):
                out += self._drop_queue()
        elif isinstance(event, Scrape):
            self._scraped(event, now)
        elif isinstance(event, FirstToken):
            self._first_token(event.request_id, now)
            return out  # frees nothing: no release to consider
        elif isinstance(event, Finish):
            self._finish(event.request_id, now, event.output_tokens)
        elif isinstance(event, Cancel):  # the client went away
            self._leave(event.request_id, now, Outcome.CANCELLED, event.output_tokens)
        elif isinstance(event, Fail):  # an error went to the client
            self._leave(event.request_id, now, Outcome.FAILED, event.output_tokens)
        elif isinstance(event, BackendFailed):
            self._backend_failed(event, now, out)
            self._circuits(now, out)
        elif isinstance(event, LeaseRefused):
            self._lease_refused(event.request_id, now)
        elif isinstance(event, FleetService):
            self._picker.fleet_service(event.served)
        elif isinstance(event, Drain):
            self._drain_until = event.until
        if self._drain_until is not None:
            self._drain(now, out)
        out += self._dispatch(now)
        if self._forgotten:
            out += (Forget(url) for url in self._forgotten)
            self._forgotten.clear()
        if self._settles:
            out += self._settles
            self._settles.clear()
        return out

    # -- quotas -----------------------------------------------------------------------

    def quota_plan(self, req: GatewayRequest) -> Plan | None:
        """The buckets and costs `req` is charged (None: no quota limits it): what a shell
        charges in the shared store before it hands the core `Arrive(req, quota=...)`."""
        return self.quotas.plan(req) if self._quota_on else None

    def _quota_admit(self, event: Arrive, now: float) -> Reject | None:
        """Charges the request's quota (or takes the shell's shared verdict); a Reject
        when its bucket cannot pay now (the Retry-After: exactly when it could)."""
        req = event.req
        plan = self.quotas.plan(req)
        if plan is None:
            return None
        share = max(1, event.quota_share)
        verdict = event.quota if event.quota is not None else self.quotas.take(plan, now, share)
        if not verdict.admitted:
            cls = self.config.class_by_name(req.priority_class)
            self._outcomes[cls.name][Outcome.REJECTED] += 1
            self._rejections[Reason.QUOTA] += 1
            return Reject(req, Reason.QUOTA, verdict.wait_s, verdict)
        self._charged[req.id] = (plan, verdict, share)
        return None

    def _quota_settle(
        self, request_id: str, now: float, output_tokens: int | None, ran: bool
    ) -> Verdict | None:
        """The request ended: its quota is settled to what it used (`quota.settle_amounts`),
        here or, when the shared store charged it, by a `Settle` effect. Its verdict."""
        charged = self._charged.pop(request_id, None) if self._charged else None
        if charged is None:
            return None
        plan, verdict, share = charged
        amounts = settle_amounts(plan, output_tokens, ran)
        if not amounts:
            return verdict
        if verdict.shared:
            pairs = tuple((c, amounts[c.kind]) for c in plan.charges if amounts.get(c.kind))
            if pairs:
                req = GatewayRequest(request_id, now, plan.prompt_tokens, None)
                self._settles.append(Settle(req, pairs))
        else:
            self.quotas.settle(plan, share, now, amounts)
        return verdict

    # -- the fleet --------------------------------------------------------------------

    def _fnow(self, now: float) -> float:
        return now * self._fleet_scale

    def _scraped(self, event: Scrape, now: float) -> None:
        """One backend's metrics: its own limits adapt from them; the gateway-wide ones
        too while it is the only backend."""
        url = event.backend
        self.fleet.on_metrics(url, event.state, self._fnow(now))
        self._backend_states[url] = event.state
        sole = len(self.fleet.backends) == 1
        if not sole and self._backend is not None:
            # the fleet grew past one backend: their own caps adapt from now on, and the
            # gateway-wide caps (shrunk while one backend was alone, say overloaded
            # before a scale-up) go back to the configured ones; nothing adapts them now
            self._limits.requests = float(self._adm.max_in_flight)
            self._limits.tokens = self._adm.max_in_flight_tokens or math.inf
        self._backend = event.state if sole else None

    def _backend_limit(self, url: str, now: float) -> InFlightLimits:
        lim = self._backend_limits.get(url)
        if lim is None:
            interval = self.config.scrape_interval_s * self.config.engine_speedup
            lim = self._backend_limits[url] = InFlightLimits(self._backend_adm, interval)
        return lim

    def _set_caps(self, now: float) -> None:
        """Each backend's cap for the router: its adaptive limit, or its current load while
        a refused shared lease holds it."""
        states, held, limits = self._backend_states, self._held, self._backend_limits

        def cap_of(url: str, requests: int, tokens: int) -> float:  # on every dispatch: lean
            lim = limits.get(url) or self._backend_limit(url, now)
            lim.observe(now, states.get(url), requests, tokens)
            cap: float = max(1.0, lim.requests)
            if held and held.get(url, -math.inf) > now:
                cap = min(cap, requests)
            return cap

        self.fleet.update_caps(cap_of)

    @property
    def backend_states(self) -> dict[str, BackendState]:
        """Each backend's last scraped state (the fleet's)."""
        return dict(self._backend_states)

    def backend_cap(self, url: str) -> int:
        """The request cap of `url` as configured (what shared leases count against)."""
        return int(self._backend_adm.max_in_flight)

    def backend_options(self, url: str) -> BackendConfig:
        """`url`'s settings (`GatewayConfig.backend_config`, read once per backend): the one
        way the shells and the core read a backend's switches."""
        opts = self._options.get(url)
        if opts is None:
            opts = self._options[url] = self.config.backend_config(url)
        return opts

    def _resumes(self, request_id: str) -> bool:
        """Whether the backend running `request_id` continues a text it is given."""
        url = self.fleet.backend_of(request_id)
        return url is not None and self.backend_options(url).resume

    def _resuming(self) -> frozenset[str]:
        """The backends that continue a text they are given: the only ones a stream whose
        client holds part of its answer may go on at (another would start it over, and
        its client would read the beginning twice)."""
        return frozenset(u for u in self.fleet.backends if self.backend_options(u).resume)

    @staticmethod
    def _needs_resume(e: Entry) -> bool:
        """Queued again with part of its stream at its client: its next backend resumes."""
        return e.holds_answer and e.first_token_at is not None

    def _resumable(self, e: Entry) -> bool:
        """Whether `e`, in flight, can be preempted and continued later where it stopped."""
        return e.req.resumable and self._resumes(e.req.id)

    def _priority(self, e: Entry, url: str) -> int | None:
        return e.cls.rank if self.backend_options(url).forward_priority else None

    def _fleet_done(self, e: Entry) -> None:
        """The request left its backend (ended or preempted): the fleet frees its slot."""
        gone = self.fleet.on_done(e.req.id, self._fnow(self._now))
        if gone is not None:
            self._forget(gone)

    def _forget(self, url: str) -> None:
        self._forgotten.append(url)
        for d in (self._backend_limits, self._backend_states, self._options, self._held):
            d.pop(url, None)
        self._prefill_spt.pop(url, None)

    def _backend_failed(self, event: BackendFailed, now: float, out: list[Effect]) -> None:
        e = self._in_flight.get(event.request_id)
        if e is None:
            return
        self._fail_over(e, event.reason, event.started, now, out)

    def _fail_over(
        self, e: Entry, reason: str, started: bool, now: float, out: list[Effect]
    ) -> None:
        """Its backend failed it (`reason`): to another backend at once, queued again at
        its place, or abandoned (the fleet's answer, `Fleet.on_failure`)."""
        retryable = not started or (e.req.resumable and self._resumes(e.req.id))
        self._settle_work(e)
        only = self._resuming() if started and retryable else None
        fo = self.fleet.on_failure(e.req.id, reason, self._fnow(now), retryable, only)
        if fo.removed is not None:
            self._forget(fo.removed)
        if fo.backend is not None:
            resumed = started or e.preemptions > 0
            priority = self._priority(e, fo.backend)
            e.released_at = now
            self._arm(e, fo.backend, now, resumed)
            out.append(Release(e.req, fo.backend, priority, resumed, failover=True))
        elif fo.outcome == "no_room":  # the others are full: first in line at its place
            self._requeue(e)
            e.resumes = started
        else:
            self._leave(e.req.id, now, Outcome.FAILED)
            out.append(Abandon(e.req, fo.outcome))

    # -- shutdown: the drain ------------------------------------------------------------

    def _drain(self, now: float, out: list[Effect]) -> None:
        """While stopping: what is queued and cannot finish by the drain's end leaves
        (503 shutdown, or an in-band error when its answer started); at the end, what is
        still in flight is cut."""
        until = self._drain_until
        assert until is not None
        for e in list(self._queued.values()):
            if now + self._expected_s(e) <= until:
                continue  # it may still be released and finish in time
            self._queue.remove(e)
            del self._queued[e.req.id]
            out.append(self._turn_away(e, Reason.SHUTDOWN, self._adm.min_retry_after_s, now))
        if now < until:
            return
        for e in list(self._in_flight.values()):
            out.append(Abort(e.req, None))
            self._leave(e.req.id, now, Outcome.FAILED)
            out.append(Abandon(e.req, Reason.SHUTDOWN))

    def _expected_s(self, e: Entry) -> float:
        """How long `e` is expected to take once released (the core's clock): its prompt
        at the fleet's learned prefill rate and its predicted output at its learned pace
        (their mean over the backends; the priors where none is learned yet)."""
        spts = list(self._prefill_spt.values())
        prefill = sum(spts) / len(spts) if spts else 1.0 / self._dl.prefill_tokens_per_s
        paces = [p for url in self.fleet.backends if (p := self.fleet.pace(url)) is not None]
        decode = (
            sum(paces) / len(paces) * self.config.engine_speedup
            if paces
            else 1.0 / self._dl.decode_tokens_per_s
        )
        return e.req.prompt_tokens * prefill + e.predicted_output * decode

    # -- hung backends: deadlines (`config.DeadlineConfig`) -----------------------------

    def _arm(self, e: Entry, url: str, now: float, resumed: bool) -> None:
        """Sets the deadline of `e`, released to `url` now: no first token (or, resumed, no
        progress) by `max(floor, factor x predicted TTFT)`, the prefill work ahead of it
        there (its own prompt, plus the text so far when resumed, bounded by its predicted
        output) at the slower of the prior and `url`'s learned rate; a non-streamed
        answer's also covers its `max_tokens` (it is silent until whole)."""
        e.backend = url
        if not self._dl.enabled:
            e.cut_at = math.inf
            return
        dl, req = self._dl, e.req
        e.armed += 1
        e.work = req.prompt_tokens + (e.predicted_output if resumed else 0)
        e.ahead = self._ahead[url]
        self._ahead[url] += e.work
        ttft = (e.ahead + e.work) * self._seconds_per_prefill_token(url)
        if not req.stream:
            out = req.max_tokens or self.config.predictor.default_max_tokens
            ttft += out * self._seconds_per_output_token(url)
        floor = e.cls.first_token_floor_s or dl.first_token_floor_s
        e.cut_at = now + max(floor, dl.first_token_factor * ttft)
        e.progress_at = None
        heapq.heappush(self._deadlines, (e.cut_at, e.seq, e.armed, req.id))

    def first_token_deadline(self, request_id: str) -> float | None:
        """When the request in flight is cut unless it progresses (the core's clock);
        None: not in flight, or no deadline."""
        e = self._in_flight.get(request_id)
        return None if e is None or math.isinf(e.cut_at) else e.cut_at

    def _seconds_per_prefill_token(self, url: str) -> float:
        prior = 1.0 / self._dl.prefill_tokens_per_s
        return max(prior, self._prefill_spt.get(url, prior))

    def _seconds_per_output_token(self, url: str) -> float:
        prior = 1.0 / self._dl.decode_tokens_per_s
        pace = self.fleet.pace(url)  # wall seconds: the core's clock is engine seconds
        return prior if pace is None else max(prior, pace * self.config.engine_speedup)

    def _learn_prefill(self, e: Entry, now: float) -> None:
        """A first token after a fresh release: a sample of its backend's prefill time per
        token of the work that was ahead of it."""
        if e.work and e.backend is not None and e.released_at is not None:
            sample = (now - e.released_at) / (e.ahead + e.work)
            old = self._prefill_spt.get(e.backend)
            self._prefill_spt[e.backend] = sample if old is None else old + _LEARN * (sample - old)
        self._settle_work(e)

    def _settle_work(self, e: Entry) -> None:
        """Its prefill is done (or it left its backend): no longer work ahead there."""
        if e.work and e.backend is not None:
            left = self._ahead[e.backend] - e.work
            if left > 0:
                self._ahead[e.backend] = left
            else:
                del self._ahead[e.backend]
        e.work = 0

    def _progressed(self, ids: Collection[str], now: float) -> None:
        """Streams whose backend sent something: their stall clock starts again."""
        flight = self._in_flight
        for rid in ids:
            e = flight.get(rid)
            if e is not None and e.first_token_at is not None and e.req.stream:
                self._progress(e, now)

    def _progress(self, e: Entry, now: float) -> None:
        """Its stream progressed: due `stall_s` after its last progress from now on."""
        if e.work:
            self._settle_work(e)
        e.progress_at = now
        if not self._dl.enabled or e.backend is None:
            return
        due = now + (e.cls.stall_s or self._dl.stall_s)
        if e.cut_at > due:  # its deadline was its first token's: the stall's is sooner
            e.cut_at = due
            heapq.heappush(self._deadlines, (due, e.seq, e.armed, e.req.id))

    def _check_deadlines(self, now: float, out: list[Effect]) -> None:
        """Cuts what is past its deadline: a stream that progressed is due again at its
        last progress + `stall_s`; the rest fail over (`Abort`, then the failure's rule)."""
        heap, flight = self._deadlines, self._in_flight
        while heap and heap[0][0] <= now:
            at, seq, armed, rid = heapq.heappop(heap)
            e = flight.get(rid)
            if e is None or e.armed != armed or at != e.cut_at:
                continue  # it left, or was sent again, or has a sooner deadline
            started = e.first_token_at is not None
            if e.progress_at is not None:
                again = e.progress_at + (e.cls.stall_s or self._dl.stall_s)
                if again > now:
                    e.cut_at = again
                    heapq.heappush(heap, (again, seq, armed, rid))
                    continue
            self._cut(e, Failure.STALLED if started else Failure.NO_FIRST_TOKEN, now, out)

    def _cut(self, e: Entry, failure: Failure, now: float, out: list[Effect]) -> None:
        out.append(Abort(e.req, failure))
        self._fail_over(e, failure.reason, e.first_token_at is not None, now, out)

    def _circuits(self, now: float, out: list[Effect]) -> None:
        """Circuit changes go to the log (`Circuit`); a backend whose circuit opened has
        what it holds moved off it at once: what has no first token, and the streams that
        can resume elsewhere (a started stream that cannot is left to its stall deadline:
        cutting it would turn a stream that may be fine into an error)."""
        for url, state, opened in self.fleet.circuit_changes(self._fnow(now)):
            out.append(Circuit(url, str(state)))
            if not (opened and self._dl.enabled):
                continue
            resumes = self.backend_options(url).resume
            for rid in self.fleet.requests_on(url):
                e = self._in_flight.get(rid)
                if e is None:
                    continue
                if e.first_token_at is not None and not (resumes and e.req.resumable):
                    continue
                self._cut(e, Failure.CIRCUIT_OPEN, now, out)

    def _lease_refused(self, request_id: str, now: float) -> None:
        e = self._in_flight.get(request_id)
        url = self.fleet.backend_of(request_id)
        if e is None or url is None:
            return
        self.fleet.unroute(request_id)
        self._requeue(e)
        e.resumes = e.first_token_at is not None  # its client holds text: the next resumes
        self._picker.fairness(e.cls.name).charge(e.tenant, -e.charged)  # it was never sent
        e.charged = 0
        self._held[url] = now + TICK_S * self.config.engine_speedup

    def _requeue(self, e: Entry) -> None:
        """Back into the queue at its original place (its order key is kept)."""
        self._unrelease(e)
        e.alive = True
        self._queue.push(e)
        self._queued[e.req.id] = e

    def _shed(self, req: GatewayRequest, reason: Reason, now: float) -> Reject:
        """A queued request answered 429 with a Retry-After: when a new request of its
        class would be admitted (its class's expected wait: the drain of the work ahead at
        the rate left to the class, bounded by aging), booked into the class's return
        schedule like a rejection at arrival."""
        cls = self.config.class_by_name(req.priority_class)
        cost = req.prompt_tokens + (req.max_tokens or self.config.predictor.default_max_tokens)
        wait, ahead = self._estimate_wait(cls, now)
        drain = wait if math.isfinite(wait) else ahead
        charged = self._quota_settle(req.id, now, None, ran=False)
        return Reject(req, reason, self._schedule_return(cls, now, drain, cost), charged)

    # -- arrivals ---------------------------------------------------------------------

    def _submit(self, req: GatewayRequest, now: float) -> _Admission:
        """Admits `req` into the queue or rejects it at once (with reason and Retry-After)."""
        if req.id in self._queued or req.id in self._in_flight:
            raise ValueError(f"request id {req.id!r} is already in the gateway")
        self._rate.observe(now, self._saturated())
        cls = self.config.class_by_name(req.priority_class)
        predicted = self._predictor.predict(
            req.max_tokens, req.prompt_tokens, cls.name, req.tenant, req.route
        )
        self._seq += 1
        own = req.tenant or self.config.default_tenant
        tenant = self._queue.of(cls.name).tenant_for(own, self.config.limits.max_queued_tenants)
        e = Entry(req, cls, tenant, predicted, self._seq)
        e.key = order_key(self.config.policy, e)

        if self._outage(now):
            self._outcomes[cls.name][Outcome.REJECTED] += 1
            self._rejections[Reason.NO_BACKEND] += 1
            return _Admission(False, Reason.NO_BACKEND, self._outage_retry_s())
        wait, drain_ahead = self._estimate_wait(cls, now)
        deadline = cls.queue_deadline_s
        if deadline is not None and wait > deadline:
            # with no rate left to its class, the best promise is its backlog's drain time
            drain = wait - deadline if math.isfinite(wait) else drain_ahead
            return self._reject(e, Reason.DEADLINE, drain, now)

        victims = self._victims(e)
        if victims is None:
            q = self._queue
            excess_n = max(q.count + 1 - self._adm.max_queue_requests, 0)
            excess_t = max(q.tokens + e.cost - self._adm.max_queue_tokens, 0)
            if self._adm.rate_unit == "tokens":  # the request cap may bind: count its tokens
                mean_cost = (q.tokens + e.cost) / (q.count + 1)
                excess: float = max(excess_t, excess_n * mean_cost)
            else:
                excess = float(excess_n)
            drain = estimate_wait(excess, self._class_rate(cls, now))
            return self._reject(e, Reason.QUEUE_FULL, drain, now)
        for v in victims:
            self._queue.remove(v)
            del self._queued[v.req.id]
            self._end(v, Outcome.REJECTED, Reason.EVICTED)
        self._queue.push(e)
        self._queued[req.id] = e
        self._inflow.add(now, cls.rank, self._work(e.cost))
        if tenant == OVERFLOW_TENANT != own:
            self._overflowed[cls.name] += 1
        return _Admission(True, evicted=tuple(v.req for v in victims))

    def _work(self, cost: float) -> float:
        return cost if self._adm.rate_unit == "tokens" else 1.0

    def _class_rate(self, cls: ClassConfig, now: float) -> float | None:
        """The service rate left to `cls`: the measured rate less what passes it under
        strict priority (at least 5% of the rate)."""
        rate = self._rate.rate
        if not rate or not self.config.policy.priority:
            return rate
        return max(rate - self._taken_from(cls, rate, now), 0.05 * rate)

    def _taken_from(self, cls: ClassConfig, rate: float, now: float) -> float:
        """The rate other classes take from `cls` under strict priority: the inflow of the
        better classes, plus what the worse classes with a guaranteed share of the slots
        take of that share while they wait (their inflow, at most their share); never so
        much that `cls` keeps less than its own guaranteed share."""
        taken = self._inflow.above(now, cls.rank)
        for q in self._queue.classes:
            share = q.cls.min_in_flight_fraction
            if q.cls.rank > cls.rank and share and q.count:
                taken += min(share * rate, self._inflow.of(now, q.cls.rank))
        return min(taken, (1.0 - cls.min_in_flight_fraction) * rate)

    def _estimate_wait(self, cls: ClassConfig, now: float) -> tuple[float, float]:
        """(expected wait of a newcomer of `cls`, time its work ahead drains at the full
        rate). Strict priority: classes above pass it while it waits (their inflow comes
        off the rate); aging (`max_wait_s`) bounds that: once aged it goes first, behind
        only the older requests of its own class, at the full rate. A guaranteed share
        bounds it too: its own class's queue drains at that share of the rate at least."""
        strict = self.config.policy.priority
        unit = self._adm.rate_unit
        n, t = self._queue.tokens_ahead(cls.rank, strict)
        work, rate = (t if unit == "tokens" else n), self._rate.rate
        ahead = estimate_wait(work, rate)
        if not strict:
            return ahead, ahead
        wait = estimate_wait(work, rate, self._taken_from(cls, rate, now) if rate else 0.0)
        own = self._queue.of(cls.name)
        own_work = own.tokens if unit == "tokens" else own.count
        if cls.max_wait_s is not None:
            wait = min(wait, cls.max_wait_s + estimate_wait(own_work, rate))
        if cls.min_in_flight_fraction and rate:
            # its guaranteed slots drain its own queue, whatever waits in better classes
            wait = min(wait, estimate_wait(own_work, cls.min_in_flight_fraction * rate))
        return wait, ahead

    def _victims(self, new: Entry) -> list[Entry] | None:
        """Queued entries to evict (worst class, newest first) so `new` fits; None: reject it."""
        count = self._queue.count + 1
        tokens = self._queue.tokens + new.cost
        if new.cost > self._adm.max_queue_tokens:
            return None
        victims: list[Entry] = []
        for q in reversed(self._queue.classes):
            if count <= self._adm.max_queue_requests and tokens <= self._adm.max_queue_tokens:
                break
            if q.cls.rank <= new.cls.rank:
                return None  # the newcomer itself is the lowest-priority newest
            for v in q.newest_first():
                victims.append(v)
                count -= 1
                tokens -= v.cost
                if count <= self._adm.max_queue_requests and tokens <= self._adm.max_queue_tokens:
                    break
        if count > self._adm.max_queue_requests or tokens > self._adm.max_queue_tokens:
            return None
        return victims

    def _reject(self, e: Entry, reason: Reason, drain_s: float, now: float) -> _Admission:
        self._outcomes[e.cls.name][Outcome.REJECTED] += 1
        self._rejections[reason] += 1
        return _Admission(False, reason, self._schedule_return(e.cls, now, drain_s, e.cost))

    def _schedule_return(self, cls: ClassConfig, now: float, drain_s: float, cost: float) -> float:
        """Retry-After for a shed request of `cls`: after its class's excess drains *and*
        after the clients of its class already told to come back have been served, so a
        burst of 429s does not send every client back at the same instant (and into a
        second rejection).

        Per class: interactive clients are not told to wait behind a batch backlog they
        will pass. `_return_at[cls]` is when the last client of the class told to retry is
        expected back plus its own service time at the rate left to its class. The spread
        covers one more drain (or one service time) past the drain at most, and never more
        than the class's queue deadline: the schedule assumes the clients told to return
        are the only ones competing, but in a sustained overload new arrivals take every
        opening too, and a schedule over a whole deadline told batch ~10 s when its class
        admitted again within 0.7 s. Without a measured rate (and no
        `initial_service_rate`) this is the minimum.
        """
        rate = self._class_rate(cls, now)
        own = self._work(cost) / rate if rate else 0.0
        horizon = max(drain_s, own) + own
        if cls.queue_deadline_s is not None:
            horizon = min(horizon, cls.queue_deadline_s)
        at = min(max(now + drain_s, self._return_at[cls.name]) + own, now + drain_s + horizon)
        self._return_at[cls.name] = at
        return max(self._adm.min_retry_after_s, at - own - now)

    # -- release and preemption -------------------------------------------------------

    def _dispatch(self, now: float) -> list[Effect]:
        """Releases (and the preemptions that make room) allowed now, best first."""
        self._limits.observe(now, self._backend, len(self._in_flight), self._in_flight_tokens)
        out: list[Effect] = []
        blocked: set[str] = set()
        lim = self._limits

        def allowed(q: ClassQueue, aged: bool) -> bool:
            if q.cls.name in blocked or len(self._in_flight) >= max(1.0, lim.requests):
                return False
            own = max(1.0, q.cls.max_in_flight_fraction * lim.requests)
            return aged or self._class_requests[q.cls.name] < own

        def below_share(q: ClassQueue) -> bool:
            return self._below_share(q.cls, 0)

        fleet = self.fleet
        self._set_caps(now)
        while self._queue.count:
            if not fleet.has_room(self._fnow(now)):
                lim.bound = True
                for b in self._backend_limits.values():
                    b.bound = True
                if self._preemptible and self._preempt_for_better(now, out):
                    continue
                break
            e = self._picker.next(now, allowed, below_share if self._shares else None)
            if e is None:
                lim.bound = True
                if self._preemptible and self._preempt_for_better(now, out):
                    continue
                break
            if not self._fits_tokens(e, now):
                blocked.add(e.cls.name)  # other classes may still fit
                lim.bound = True
                continue
            url = self._route(e, now)
            if url is None:  # (one that must resume waits for a backend that resumes)
                break
            self._release(e, now, out, url)
        self._rate.observe(now, self._saturated())
        return out

    def _fits_tokens(self, e: Entry, now: float) -> bool:
        lim, cls = self._limits, e.cls
        if self._in_flight and self._in_flight_tokens + e.cost > lim.tokens:
            return False
        aged = cls.max_wait_s is not None and now - e.req.arrival_s >= cls.max_wait_s
        mine = self._class_tokens[cls.name]
        return aged or not mine or mine + e.cost <= cls.max_in_flight_fraction * lim.tokens

    def _route(self, e: Entry, now: float) -> str | None:
        allowed = e.req.allowed
        if self._needs_resume(e):  # it goes on only where it is resumed
            resuming = self._resuming()
            allowed = resuming if allowed is None else allowed & resuming
        route = RouteRequest(e.cost, e.req.prefix_hashes, allowed)
        return self.fleet.route(e.req.id, route, self._fnow(now))

    def _release(self, e: Entry, now: float, out: list[Effect], backend: str) -> None:
        self._queue.remove(e)
        del self._queued[e.req.id]
        self._in_flight[e.req.id] = e
        self._in_flight_tokens += e.cost
        self._class_requests[e.cls.name] += 1
        self._class_tokens[e.cls.name] += e.cost
        if e.cls.preemptible:
            self._preemptible[e.req.id] = e
        e.released_at = now
        # charged once: a preempted or requeued request released again is the same work
        charge = 0 if e.charged else e.cost
        e.charged += charge
        self._picker.fairness(e.cls.name).dispatched(e.tenant, charge)
        resumed = e.holds_answer
        e.resumes = False
        self._arm(e, backend, now, resumed)
        charged = self._charged.get(e.req.id) if self._charged else None
        verdict = charged[1] if charged is not None else None
        out.append(Release(e.req, backend, self._priority(e, backend), resumed, quota=verdict))

    def _preempt_for_better(self, now: float, out: list[Effect]) -> bool:
        """With every slot taken: the best class that waits (and its own cap admits) takes
        the slot of a preemptible request of a worse class; False when none can."""
        lim = self._limits
        full = not self.fleet.has_room(self._fnow(now))
        if len(self._in_flight) < max(1.0, lim.requests) and not full:
            return False  # a slot is free: what waits is held by its own class cap
        for q in self._queue.classes:
            if not q.count:
                continue
            if self._class_requests[q.cls.name] >= max(
                1.0, q.cls.max_in_flight_fraction * lim.requests
            ):
                continue
            victim = self._victim(q.cls.rank, now)
            if victim is None:
                return False  # a worse class finds fewer victims still
            waiting = self._picker.fairness(q.cls.name).pick(q)
            victim.preemptions += 1
            self._preemptions[victim.cls.name] += 1
            if self._resumable(victim):
                self._requeue(victim)
                out.append(Preempt(victim.req))
            else:  # ended, not resumed: its client gets a retryable error
                out.append(Preempt(victim.req, resume=False))
                self._leave(victim.req.id, now, Outcome.FAILED)
            self._set_caps(now)
            url = self._route(waiting, now)
            if url is None:  # cannot happen: the victim's slot is free
                return False
            self._release(waiting, now, out, url)
            return True
        return False

    def _victim(self, rank: int, now: float) -> Entry | None:
        """The preemptible request of a class worse than `rank` with the fewest tokens out
        (no first token yet, else the latest first token; ties: worst class, latest
        release), that has run `min_run_s`, has preemptions left and runs on a backend that
        resumes (or may be ended: `preempt_ends`)."""
        best: Entry | None = None
        best_key: tuple[float, int, float] = (-math.inf, 0, 0.0)
        for e in self._preemptible.values():
            c = e.cls
            if c.rank <= rank or e.preemptions >= c.max_preemptions:
                continue
            if not self._preempt_ends and not self._resumable(e):
                continue
            released = e.released_at if e.released_at is not None else now
            if now - released < c.min_run_s or (
                c.min_in_flight_fraction and self._below_share(c, 1)
            ):
                continue
            key = (math.inf if e.first_token_at is None else e.first_token_at, c.rank, released)
            if best is None or key > best_key:
                best, best_key = e, key
        return best

    def _below_share(self, cls: ClassConfig, leaving: int) -> bool:
        """Whether `cls` would hold fewer than its guaranteed share of the slots with
        `leaving` of its requests in flight gone."""
        guaranteed = cls.min_in_flight_fraction * self._limits.requests
        return self._class_requests[cls.name] - leaving < guaranteed

    def _saturated(self) -> bool:
        return self._queue.count > 0

    # -- lifecycle events -------------------------------------------------------------

    def _first_token(self, request_id: str, now: float) -> None:
        """Records TTFT against the class target (once per request)."""
        e = self._in_flight.get(request_id)
        if e is None or e.first_token_at is not None:
            return  # unknown, or resumed: its client saw its first token long ago
        e.first_token_at = now
        self._learn_prefill(e, now)
        if e.req.stream:
            self._progress(e, now)
        self.fleet.on_first_token(request_id, self._fnow(now))
        slo = self._ttft[e.cls.name]
        slo[1] += 1
        target = e.cls.ttft_target_s
        if target is None or now - e.req.arrival_s <= target:
            slo[0] += 1

    def _finish(self, request_id: str, now: float, output_tokens: int) -> None:
        """The request completed with `output_tokens` (all its client received); frees its
        budget, learns. A preempted request whose answer ended before its upstream closed
        completes from the queue."""
        e = self._in_flight.get(request_id)
        if e is None:
            e = self._queued.pop(request_id, None)
            if e is None:
                return
            self._queue.remove(e)
        else:
            self.fleet.on_finish(request_id, self._fnow(now), output_tokens)
            self._unrelease(e)
        self._rate.observe(now, self._saturated())
        r = e.req
        self._predictor.observe(
            r.max_tokens, r.prompt_tokens, e.cls.name, r.tenant, r.route, output_tokens
        )
        self._picker.fairness(e.cls.name).charge(e.tenant, output_tokens - e.predicted_output)
        work = r.prompt_tokens + output_tokens if self._adm.rate_unit == "tokens" else 1
        self._rate.on_finish(now, work)
        self._quota_settle(r.id, now, output_tokens, ran=True)
        self._end(e, Outcome.COMPLETED)

    def _leave(
        self, request_id: str, now: float, outcome: Outcome, output_tokens: int | None = None
    ) -> None:
        """It ends early (cancelled, failed): dropped from the queue, or freed in flight;
        its quota is charged what it used (nothing, when it never reached a backend)."""
        e = self._queued.pop(request_id, None)
        if e is not None:
            self._queue.remove(e)
        else:
            e = self._in_flight.get(request_id)
            if e is None:
                return
            self._unrelease(e)
        self._rate.observe(now, self._saturated())
        ran = e.released_at is not None
        self._quota_settle(request_id, now, output_tokens if ran else None, ran)
        self._end(e, outcome)

    def _expire(self, now: float) -> list[GatewayRequest]:
        """Queued requests past their class's queue deadline, removed (answer each 429)."""
        gone = self._queue.expired(now)
        for e in gone:
            del self._queued[e.req.id]
            self._end(e, Outcome.REJECTED, Reason.DEADLINE)  # `_shed` settles its quota
        if gone:
            self._rate.observe(now, self._saturated())
        return [e.req for e in gone]

    def _outage(self, now: float) -> bool:
        """True once every listed backend has been unhealthy for the fleet's
        `max_outage_wait_s` (wall): from then on nothing waits for them."""
        fnow = self._fnow(now)
        if not self.fleet.down(fnow):
            self._outage_since = None
            return False
        if self._outage_since is None:
            self._outage_since = fnow
        return fnow - self._outage_since >= self.config.fleet.health.max_outage_wait_s

    def _outage_retry_s(self) -> float:
        """Retry-After in an outage (the core's clock): when a half-open probe may have
        closed a circuit again."""
        return max(self._adm.min_retry_after_s,
                   self.config.fleet.health.open_s * self.config.engine_speedup)  # fmt: skip

    def _drop_queue(self) -> list[Effect]:
        """An outage: every queued request leaves — 429 no_backend, or, when its client
        already holds part of the answer (preempted, or requeued after its backend failed
        mid-stream), an in-band error (`Abandon`)."""
        out: list[Effect] = []
        retry_after = self._outage_retry_s()
        for e in self._queued.values():
            self._queue.remove(e)
            out.append(self._turn_away(e, Reason.NO_BACKEND, retry_after, self._now))
        self._queued.clear()
        return out

    def _turn_away(self, e: Entry, reason: Reason, retry_after_s: float, now: float) -> Effect:
        """A queued request that must leave (`reason`): 429/503 with `retry_after_s`, or,
        when its client holds part of the answer, an in-band error (`Abandon`)."""
        if e.holds_answer:
            self._quota_settle(e.req.id, now, None, ran=True)
            self._end(e, Outcome.FAILED)
            return Abandon(e.req, reason)
        charged = self._quota_settle(e.req.id, now, None, ran=False)
        self._end(e, Outcome.REJECTED, reason)
        return Reject(e.req, reason, retry_after_s, charged)

    def _unrelease(self, e: Entry) -> None:
        self._settle_work(e)
        e.armed += 1  # its deadline on the heap is stale from now
        self._fleet_done(e)
        del self._in_flight[e.req.id]
        self._in_flight_tokens -= e.cost
        self._class_requests[e.cls.name] -= 1
        self._class_tokens[e.cls.name] -= e.cost
        self._preemptible.pop(e.req.id, None)
        self._picker.fairness(e.cls.name).settled(e.tenant)

    def _end(self, e: Entry, outcome: Outcome, reason: Reason | None = None) -> None:
        self._outcomes[e.cls.name][outcome] += 1
        if reason is not None:
            self._rejections[reason] += 1

    # -- observability ----------------------------------------------------------------

    @property
    def holds_requests(self) -> bool:
        """Some request is queued or in flight: `stats` says it too, but a simulator asks
        on every tick, and `stats` copies every counter."""
        return bool(self._in_flight) or self._queue.count > 0

    @property
    def stats(self) -> GatewayStats:
        return GatewayStats(
            queue_depth={q.cls.name: q.count for q in self._queue.classes},
            queue_tokens={q.cls.name: q.tokens for q in self._queue.classes},
            in_flight_requests=len(self._in_flight),
            in_flight_tokens=self._in_flight_tokens,
            limit_requests=self._limits.requests,
            limit_tokens=self._limits.tokens,
            service_rate=self._rate.rate,
            outcomes={c: {o: n.get(o, 0) for o in _OUTCOMES} for c, n in self._outcomes.items()},
            rejections=dict(self._rejections),
            ttft_slo={c: (m, s) for c, (m, s) in self._ttft.items()},
            preemptions={c.name: self._preemptions.get(c.name, 0) for c in self.config.classes},
            fairness_tenants={c: len(ts) for c, ts in self._picker.tracked().items()},
            tenant_overflow={c.name: self._overflowed.get(c.name, 0) for c in self.config.classes},
            quota_buckets=self.quotas.buckets,
        )

    def tenant_service(self, cls: str, tenant: str) -> float | None:
        """The service fairness charges `tenant` with in class `cls` (None: untracked)."""
        return self._picker.fairness(cls).service(tenant)

    def fairness_tenants(self) -> dict[str, list[str]]:
        """Per class, the tenants whose service fairness tracks (bounded: see
        `policies`); what the shell asks Redis about, answered by `FleetService`."""
        return self._picker.tracked()
