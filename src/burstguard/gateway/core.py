"""GatewayCore: the gateway's decisions as a pure state machine (one core, two clocks).

The asyncio server drives it with the real clock, `burstguard sim --gateway` with a
virtual one; every method takes `now` and nothing here reads a clock or awaits. A request
`submit`ted and accepted ends in exactly one outcome — completed, rejected (evicted or
past its deadline), cancelled, or failed — and `stats` counts them by class.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from burstguard.gateway.admission import (
    ClassInflow,
    InFlightLimits,
    ServiceRate,
    estimate_wait,
)
from burstguard.gateway.config import ClassConfig, GatewayConfig
from burstguard.gateway.policies import Picker, order_key
from burstguard.gateway.predictor import OutputPredictor
from burstguard.gateway.queue import ClassQueue, GatewayQueue
from burstguard.gateway.request import BackendState, Entry, GatewayRequest

__all__ = ["Admission", "BackendState", "GatewayCore", "GatewayRequest", "GatewayStats"]

OUTCOMES = ("completed", "rejected", "cancelled", "failed")
# how often a driver (the live server, the simulator) dispatches and expires deadlines
TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to `submit`: accepted, or rejected with a reason and a Retry-After.

    `evicted` are queued requests shed to make room (answer each with 429). Reasons:
    `deadline` (cannot start before the class's queue deadline), `queue_full`.
    """

    accepted: bool
    reason: str | None = None
    retry_after_s: float | None = None
    evicted: tuple[GatewayRequest, ...] = ()
    estimated_wait_s: float = 0.0
    predicted_output_tokens: int = 0


@dataclass(frozen=True, slots=True)
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
    rejections: dict[str, int]  # reason -> count
    ttft_slo: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (met, seen)


class GatewayCore:
    """Queue, order, admit and shed; see the module docstrings of the parts for the why."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self._adm = config.admission
        self._queue = GatewayQueue(config.classes)
        self._picker = Picker(config.policy, self._queue)
        self._predictor = OutputPredictor(config.predictor)
        self._rate = ServiceRate(self._adm.rate_half_life_s, self._adm.initial_service_rate)
        self._limits = InFlightLimits(self._adm, config.scrape_interval_s)
        self._inflow = ClassInflow(self._adm.rate_half_life_s)
        self._queued: dict[str, Entry] = {}
        self._in_flight: dict[str, Entry] = {}
        self._in_flight_tokens = 0
        self._seq = 0
        self._outcomes = {c.name: Counter[str]() for c in config.classes}
        self._rejections = Counter[str]()
        self._ttft: dict[str, list[int]] = {c.name: [0, 0] for c in config.classes}
        self._return_at = -math.inf  # see _schedule_return

    # -- arrivals ---------------------------------------------------------------------

    def submit(self, req: GatewayRequest, now: float) -> Admission:
        """Admits `req` into the queue or rejects it at once (with reason and Retry-After)."""
        if req.id in self._queued or req.id in self._in_flight:
            raise ValueError(f"request id {req.id!r} is already in the gateway")
        self._rate.observe(now, self._saturated())
        cls = self.config.class_by_name(req.priority_class)
        predicted = self._predictor.predict(
            req.max_tokens, req.prompt_tokens, req.tenant, req.route
        )
        self._seq += 1
        e = Entry(req, cls, req.tenant or self.config.default_tenant, predicted, self._seq)
        e.key = order_key(self.config.policy, e)

        rate = self._rate.rate
        wait, drain_ahead = self._estimate_wait(cls, now)
        deadline = cls.queue_deadline_s
        if deadline is not None and wait > deadline:
            # with no rate left to its class, the best promise is its backlog's drain time
            drain = wait - deadline if math.isfinite(wait) else drain_ahead
            return self._reject(e, "deadline", drain, wait, now)

        victims = self._victims(e)
        if victims is None:
            q = self._queue
            excess_n = max(q.count + 1 - self._adm.max_queue_requests, 0)
            excess_t = max(q.tokens + e.cost - self._adm.max_queue_tokens, 0)
            if self._adm.rate_unit == "tokens":  # the request cap may bind: count its tokens
                mean_cost = (q.tokens + e.cost) / (q.count + 1)
                excess: float = max(excess_t, excess_n * mean_cost)
            else:
                excess = excess_n
            return self._reject(e, "queue_full", estimate_wait(excess, rate), wait, now)
        for v in victims:
            self._queue.remove(v)
            del self._queued[v.req.id]
            self._end(v, "rejected", "evicted")
        self._queue.push(e)
        self._queued[req.id] = e
        self._inflow.add(now, cls.rank, self._work(e.cost))
        return Admission(
            True,
            evicted=tuple(v.req for v in victims),
            estimated_wait_s=wait,
            predicted_output_tokens=predicted,
        )

    def _work(self, cost: float) -> float:
        return cost if self._adm.rate_unit == "tokens" else 1.0

    def _estimate_wait(self, cls: ClassConfig, now: float) -> tuple[float, float]:
        """(expected wait of a newcomer of `cls`, time its work ahead drains at the full
        rate). Strict priority: classes above pass it while it waits (their inflow comes
        off the rate), until aging (`max_wait_s`) puts it ahead of everyone."""
        strict = self.config.policy.priority
        n, t = self._queue.tokens_ahead(cls.rank, strict)
        work, rate = (t if self._adm.rate_unit == "tokens" else n), self._rate.rate
        ahead = estimate_wait(work, rate)
        if not strict:
            return ahead, ahead
        wait = estimate_wait(work, rate, self._inflow.above(now, cls.rank))
        if cls.max_wait_s is not None and wait > cls.max_wait_s:
            wait = max(ahead, cls.max_wait_s)
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

    def _reject(self, e: Entry, reason: str, drain_s: float, wait: float, now: float) -> Admission:
        self._outcomes[e.cls.name]["rejected"] += 1
        self._rejections[reason] += 1
        retry = self._schedule_return(now, drain_s, e.cost)
        return Admission(False, reason, retry, (), wait, e.predicted_output)

    def _schedule_return(self, now: float, drain_s: float, cost: float) -> float:
        """Retry-After for a shed request: after the excess drains *and* after the clients
        already told to come back have been served, so a burst of 429s does not send every
        client back at the same instant (and into a second rejection).

        `_return_at` is when the last client told to retry is expected back plus its own
        service time; each rejection extends it by its work at the measured rate. Without a
        measured rate (and no `initial_service_rate`) this is the minimum Retry-After.
        """
        rate = self._rate.rate
        own = self._work(cost) / rate if rate else 0.0
        at = max(now + drain_s, self._return_at) + own
        self._return_at = at
        return max(self._adm.min_retry_after_s, at - own - now)

    # -- dispatch ---------------------------------------------------------------------

    def dispatch(self, now: float, backend: BackendState | None = None) -> list[GatewayRequest]:
        """Requests to release to the backend now, best first, while the caps leave room."""
        self._limits.observe(now, backend, len(self._in_flight), self._in_flight_tokens)
        out: list[GatewayRequest] = []
        blocked: set[str] = set()
        lim = self._limits

        def allowed(q: ClassQueue) -> bool:
            if q.cls.name in blocked:
                return False
            return len(self._in_flight) < max(1.0, q.cls.max_in_flight_fraction * lim.requests)

        while self._queue.count:
            e = self._picker.next(now, allowed)
            if e is None:
                lim.bound = True
                break
            budget = e.cls.max_in_flight_fraction * lim.tokens
            if self._in_flight and self._in_flight_tokens + e.cost > budget:
                blocked.add(e.cls.name)  # other classes may still fit
                lim.bound = True
                continue
            self._queue.remove(e)
            del self._queued[e.req.id]
            self._in_flight[e.req.id] = e
            self._in_flight_tokens += e.cost
            self._picker.fairness(e.cls.name).charge(e.tenant, e.cost)
            out.append(e.req)
        self._rate.observe(now, self._saturated())
        return out

    def _saturated(self) -> bool:
        return self._queue.count > 0

    # -- lifecycle events -------------------------------------------------------------

    def on_first_token(self, request_id: str, now: float) -> bool:
        """Records TTFT against the class target; False for an unknown id."""
        e = self._in_flight.get(request_id)
        if e is None:
            return False
        slo = self._ttft[e.cls.name]
        slo[1] += 1
        target = e.cls.ttft_target_s
        if target is None or now - e.req.arrival_s <= target:
            slo[0] += 1
        return True

    def on_finish(self, request_id: str, now: float, output_tokens: int) -> bool:
        """A dispatched request completed with `output_tokens`; frees its budget, learns."""
        e = self._in_flight.get(request_id)
        if e is None:
            return False
        self._rate.observe(now, self._saturated())
        self._release(e)
        r = e.req
        self._predictor.observe(r.max_tokens, r.prompt_tokens, r.tenant, r.route, output_tokens)
        self._picker.fairness(e.cls.name).charge(e.tenant, output_tokens - e.predicted_output)
        work = r.prompt_tokens + output_tokens if self._adm.rate_unit == "tokens" else 1
        self._rate.on_finish(now, work)
        self._end(e, "completed")
        return True

    def cancel(self, request_id: str, now: float) -> bool:
        """The client went away: drop it from the queue, or free it in flight (abort upstream)."""
        return self._leave(request_id, now, "cancelled")

    def fail(self, request_id: str, now: float) -> bool:
        """The backend failed the request (an error went to the client)."""
        return self._leave(request_id, now, "failed")

    def _leave(self, request_id: str, now: float, outcome: str) -> bool:
        e = self._queued.pop(request_id, None)
        if e is not None:
            self._queue.remove(e)
        else:
            e = self._in_flight.get(request_id)
            if e is None:
                return False
            self._release(e)
        self._rate.observe(now, self._saturated())
        self._end(e, outcome)
        return True

    def expire(self, now: float) -> list[GatewayRequest]:
        """Queued requests past their class's queue deadline, removed (answer each 429)."""
        gone = self._queue.expired(now)
        for e in gone:
            del self._queued[e.req.id]
            self._end(e, "rejected", "deadline")
        if gone:
            self._rate.observe(now, self._saturated())
        return [e.req for e in gone]

    def retry_after(
        self, request_class: str | None, now: float | None = None, cost: float = 0.0
    ) -> float:
        """Seconds until the backlog ahead of a new request of this class drains (for 429s).

        With `now`, the answer is a promise: the request (of `cost` tokens) is booked into
        the return schedule like a rejection at `submit` (see `_schedule_return`).
        """
        cls = self.config.class_by_name(request_class)
        n, t = self._queue.tokens_ahead(cls.rank, self.config.policy.priority)
        work = t if self._adm.rate_unit == "tokens" else n
        drain = estimate_wait(work, self._rate.rate)
        if now is None:
            return max(self._adm.min_retry_after_s, drain)
        return self._schedule_return(now, drain, cost)

    def _release(self, e: Entry) -> None:
        del self._in_flight[e.req.id]
        self._in_flight_tokens -= e.cost

    def _end(self, e: Entry, outcome: str, reason: str | None = None) -> None:
        self._outcomes[e.cls.name][outcome] += 1
        if reason is not None:
            self._rejections[reason] += 1

    # -- observability ----------------------------------------------------------------

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
            outcomes={c: {o: n[o] for o in OUTCOMES} for c, n in self._outcomes.items()},
            rejections=dict(self._rejections),
            ttft_slo={c: (m, s) for c, (m, s) in self._ttft.items()},
        )
