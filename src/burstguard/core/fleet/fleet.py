"""Fleet: the gateway's view of its engine replicas, and the decisions it takes about them.

One pure object the gateway core (or the simulator) drives with timestamped events —
discovery lists, scrapes, probe results, request sends, successes, failures, ends — and
asks: where does this request go (`route`), where does a failed one go (`on_failure`),
which backends need a /health probe (`probes_due`), is the gateway ready, what are the
per-backend metrics. It reads no clock and does no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from burstguard.core.fleet.config import FleetConfig
from burstguard.core.fleet.health import CircuitState, HealthCheck
from burstguard.core.fleet.membership import Membership
from burstguard.core.fleet.retry_budget import RetryBudget
from burstguard.core.fleet.router import BackendView, Router, RouteRequest
from burstguard.core.fleet.state import BackendState

FAILURE_REASONS = ("connect", "reset", "status_5xx", "timeout", "bad_answer", "circuit_open")
"""Passive failures the core reports; each counts towards the backend's circuit breaker
(`circuit_open`: the core moved a request off a backend whose circuit had opened)."""


@dataclass(frozen=True, slots=True)
class FleetChange:
    """What a discovery update changed. `removed`: drained (nothing left in flight), gone."""

    added: tuple[str, ...] = ()
    draining: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Failover:
    """The answer to `on_failure`: send the request to `backend` now, or give up.

    `outcome`: `failover` (sent again), `not_retryable` (the core said it may not be
    resent: after its first token, without resume), `budget` (the retry budget is spent),
    `no_backend` (no other routable backend), `no_room` (others exist but are at their
    caps: the core may queue it again at the front instead of failing it). Without a
    failover the request is over for the fleet (`on_done` is then a no-op). `removed`
    names the failed backend when that was the last request of a draining one (now
    forgotten: stop its scraper), with or without a failover.
    """

    backend: str | None
    outcome: str
    removed: str | None = None
    tried: tuple[str, ...] = ()  # every backend the request went to, in order


@dataclass(frozen=True, slots=True)
class BackendStats:
    """Per-backend figures for /metrics (label `backend`)."""

    url: str
    active: bool  # False: draining
    up: bool  # the last /health probe answered 2xx
    healthy: bool  # the circuit is closed
    circuit: CircuitState
    in_flight: int
    in_flight_tokens: int
    routed: int  # requests sent to it, failovers included
    failovers: int  # requests that failed on it and were sent elsewhere
    failures: dict[str, int]  # passive failures by reason
    metrics_age_s: float | None  # None: never scraped successfully
    seconds_per_token: float | None  # its streams' recent time per output token; None: none yet


@dataclass(slots=True)
class _Backend:
    url: str
    health: HealthCheck
    cap: float = float("inf")
    metrics: BackendState | None = None
    metrics_at: float | None = None
    requests: dict[str, int] = field(default_factory=dict)  # request id -> tokens
    tokens: int = 0
    routed: int = 0
    failovers: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    seconds_per_token: float | None = None  # its streams' time per output token (EWMA)
    circuit_seen: CircuitState = CircuitState.CLOSED  # as `circuit_changes` last told it
    opened_seen: int = 0  # the breaker's `opened` count `circuit_changes` last told

    def learn_pace(self, tpot_s: float, weight: float) -> None:
        old = self.seconds_per_token
        self.seconds_per_token = tpot_s if old is None else old + weight * (tpot_s - old)


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class _Attempt:
    req: RouteRequest
    backend: str
    tried: list[str]
    retry: bool = False  # this attempt spends the retry budget
    first_token_at: float | None = None  # this backend sent the request's first token

    def __init__(
        self,
        req: RouteRequest,
        backend: str,
        tried: list[str],
        retry: bool = False,
        first_token_at: float | None = None,
    ) -> None:
        self.req = req
        self.backend = backend
        self.tried = tried
        self.retry = retry
        self.first_token_at = first_token_at


class Fleet:
    """Backends (active and draining), their health and load, the router, the budget."""

    def __init__(self, cfg: FleetConfig, urls: Iterable[str] = (), now: float = 0.0) -> None:
        self.cfg = cfg
        self.router = Router(cfg.router)
        self.budget = RetryBudget(cfg.retry_budget)
        self._members = Membership()
        self._backends: dict[str, _Backend] = {}
        self._attempts: dict[str, _Attempt] = {}
        self.failover_outcomes: Counter[str] = Counter()
        self.set_backends(urls, now)

    # -- discovery --------------------------------------------------------------------

    def set_backends(self, urls: Iterable[str], now: float) -> FleetChange:
        """Discovery's current list (normalised URLs). New ones start closed and are
        probed at once; missing ones drain; drained ones are forgotten."""
        change = self._members.update(urls)
        for url in change.added:
            self._backends[url] = _Backend(url, HealthCheck(self.cfg.health, now))
        removed = tuple(u for u in change.draining if self._drop_if_drained(u))
        return FleetChange(change.added, change.draining, change.restored, removed)

    def _drop_if_drained(self, url: str) -> bool:
        b = self._backends[url]
        if b.requests or self._members.is_active(url):
            return False
        self._members.drop(url)
        del self._backends[url]
        return True

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend still known, active first."""
        return self._members.all

    # -- observations -----------------------------------------------------------------

    def on_metrics(self, url: str, state: BackendState | None, now: float) -> None:
        """A scrape of `url` at `now`; None: it failed (the last state ages)."""
        b = self._backends.get(url)
        if b is not None and state is not None:
            b.metrics, b.metrics_at = state, now

    def probes_due(self, now: float) -> list[str]:
        """Backends to probe now (each marked as probing until `on_probe`)."""
        due = [b.url for b in self._backends.values() if b.health.probe_due(now)]
        for url in due:
            self._backends[url].health.on_probe_sent(now)
        return due

    def on_probe(self, url: str, ok: bool, now: float) -> None:
        b = self._backends.get(url)
        if b is not None:
            b.health.on_probe_result(ok, now)

    def requests_on(self, url: str) -> tuple[str, ...]:
        """The requests in flight on `url` (none once it is forgotten)."""
        b = self._backends.get(url)
        return () if b is None else tuple(b.requests)

    def pace(self, url: str) -> float | None:
        """`url`'s streams' recent time per output token (None: not learned yet)."""
        b = self._backends.get(url)
        return None if b is None else b.seconds_per_token

    def circuit_changes(self, now: float) -> list[tuple[str, CircuitState, bool]]:
        """Each backend whose circuit changed since the last call: (url, its state now,
        whether it opened meanwhile: an opening is told even when the circuit has gone
        half-open again before this call). For the log, and the core's "its circuit
        opened: move what it holds" rule."""
        out: list[tuple[str, CircuitState, bool]] = []
        for url, b in self._backends.items():
            breaker = b.health.breaker
            state = breaker.state(now)
            opened = breaker.opened != b.opened_seen
            if opened or state is not b.circuit_seen:
                out.append((url, state, opened))
                b.circuit_seen, b.opened_seen = state, breaker.opened
        return out

    def set_cap(self, url: str, cap: float) -> None:
        """The gateway's in-flight request cap for `url` (its adaptive limits)."""
        b = self._backends.get(url)
        if b is not None:
            b.cap = cap

    # -- routing ----------------------------------------------------------------------

    def views(self, now: float, exclude: Iterable[str] = ()) -> list[BackendView]:
        """The routable backends: active, circuit allowing, not in `exclude`."""
        skip = set(exclude)
        stale_s = self.cfg.health.metrics_stale_s
        out = []
        for url in self._members.active:
            b = self._backends[url]
            if url in skip or not b.health.breaker.allows(now):
                continue
            m = b.metrics
            out.append(
                BackendView(
                    url=url,
                    in_flight=len(b.requests),
                    in_flight_tokens=b.tokens,
                    cap=b.cap,
                    waiting=None if m is None else m.waiting,
                    kv_usage=None if m is None else m.kv_usage,
                    stale=b.metrics_at is not None and now - b.metrics_at > stale_s,
                    seconds_per_token=b.seconds_per_token,
                )
            )
        return out

    def route(self, request_id: str, req: RouteRequest, now: float) -> str | None:
        """The backend for a request the queue released; None: none routable with room
        (the core keeps it queued). Counts it in that backend's in flight."""
        if request_id in self._attempts:
            raise ValueError(f"request {request_id!r} is already routed")
        url = self.router.pick(req, self._allowed(req, self.views(now)))
        if url is not None:
            self.budget.on_request(now)
            self._send(request_id, _Attempt(req, url, [url]), now)
        return url

    @staticmethod
    def _allowed(req: RouteRequest, views: list[BackendView]) -> list[BackendView]:
        """The views a request restricted to some backends (a subset hint) may use."""
        if req.allowed is None:
            return views
        return [v for v in views if v.url in req.allowed]

    def load(self, url: str) -> tuple[int, int]:
        """(requests, tokens) in flight on `url` (0, 0 once forgotten): the fleet is the one
        owner of per-backend load, which the core's per-backend caps adapt from."""
        b = self._backends.get(url)
        return (0, 0) if b is None else (len(b.requests), b.tokens)

    def update_caps(self, cap_of: Callable[[str, int, int], float]) -> None:
        """Sets every backend's cap (in `backends` order) to `cap_of(url, requests, tokens
        in flight)`: the core's cap update on every dispatch, without a lookup per call."""
        backends = self._backends
        for url in self._members.all:
            b = backends.get(url)
            if b is None:  # forgotten meanwhile: as `load` and `set_cap` have it
                cap_of(url, 0, 0)
            else:
                b.cap = cap_of(url, len(b.requests), b.tokens)

    def has_room(self, now: float) -> bool:
        """Some routable backend is below its cap (else `route` would answer None): what
        `views` would say, without building them (asked before every release)."""
        for url in self._members.active:
            b = self._backends[url]
            if b.health.breaker.allows(now) and len(b.requests) < b.cap:
                return True
        return False

    def unroute(self, request_id: str) -> None:
        """Takes back a `route` whose request was never sent (its shared lease was
        refused: another gateway took the slot); the core queues it again."""
        a = self._attempts.get(request_id)
        if a is None:
            raise ValueError(f"request {request_id!r} is not routed")
        b = self._backends[a.backend]
        b.routed -= 1
        b.health.breaker.on_unsent()
        self._leave(request_id, a)

    def _send(self, request_id: str, attempt: _Attempt, now: float) -> None:
        b = self._backends[attempt.backend]
        b.requests[request_id] = attempt.req.tokens
        b.tokens += attempt.req.tokens
        b.routed += 1
        b.health.breaker.on_send(now)
        self._attempts[request_id] = attempt

    def tried(self, request_id: str) -> tuple[str, ...]:
        """The backends a routed request went to, in order (for its log line; read it
        before `on_done`, or from the `Failover` that ended it)."""
        a = self._attempts.get(request_id)
        return () if a is None else tuple(a.tried)

    def backend_of(self, request_id: str) -> str | None:
        a = self._attempts.get(request_id)
        return None if a is None else a.backend

    def on_success(self, request_id: str, now: float) -> None:
        """Its backend answered (response head or first token): a success for the breaker."""
        a = self._attempts.get(request_id)
        if a is not None and a.backend in self._backends:
            self._backends[a.backend].health.breaker.on_success(now)

    def on_first_token(self, request_id: str, now: float) -> None:
        """Its backend sent the request's first token: a success, and the start of the
        stream whose pace `on_finish` learns."""
        self.on_success(request_id, now)
        a = self._attempts.get(request_id)
        if a is not None and a.first_token_at is None:
            a.first_token_at = now

    def on_finish(self, request_id: str, now: float, output_tokens: int) -> None:
        """The request completed with `output_tokens`: a success, and, when the whole
        stream came from this backend, a sample of its pace (time per output token after
        the first), which the score router weighs the work ahead by. Call before
        `on_done`."""
        self.on_success(request_id, now)
        a = self._attempts.get(request_id)
        weight = self.cfg.router.speed_weight
        if a is None or a.first_token_at is None or output_tokens < 2 or weight == 0:
            return
        tpot = (now - a.first_token_at) / (output_tokens - 1)
        self._backends[a.backend].learn_pace(tpot, weight)

    def on_failure(
        self,
        request_id: str,
        reason: str,
        now: float,
        retryable: bool = True,
        only: frozenset[str] | None = None,
    ) -> Failover:
        """Its backend failed it (`reason` in FAILURE_REASONS). The failure counts for
        that backend's breaker and frees its slot; if `retryable` (no token reached the
        client yet, or the stream can be resumed) and the budget allows, the request is
        routed to another backend it has not tried (and in `only`, when given: a started
        stream goes on only where it can be resumed), which the answer names. A request
        moved off a backend whose circuit opened (`circuit_open`) spends no budget: that
        backend does no more work on it, so the move adds no load (the budget is there
        against retries that multiply the work of an overloaded fleet)."""
        spend = reason != "circuit_open"
        a = self._attempts.get(request_id)
        if a is None:
            raise ValueError(f"request {request_id!r} is not routed")
        if reason not in FAILURE_REASONS:
            raise ValueError(f"failure reason {reason!r}: expected one of {FAILURE_REASONS}")
        b = self._backends[a.backend]
        b.failures[reason] += 1
        b.health.breaker.on_failure(now)
        self._leave(request_id, a)
        outcome, url = "not_retryable", None
        if retryable:
            views = self._allowed(a.req, self.views(now, exclude=a.tried))
            if only is not None:
                views = [v for v in views if v.url in only]
            if not views:
                outcome = "no_backend"
            elif not any(v.has_room for v in views):
                outcome = "no_room"
            elif spend and not self.budget.try_retry(now):
                outcome = "budget"
            else:
                url = self.router.pick(a.req, views)
                assert url is not None  # some view has room
                outcome = "failover"
                b.failovers += 1
                self._send(request_id, _Attempt(a.req, url, [*a.tried, url], retry=spend), now)
        self.failover_outcomes[outcome] += 1
        gone = b.url if self._drop_if_drained(b.url) else None
        return Failover(url, outcome, gone, (*a.tried, url) if url else tuple(a.tried))

    def on_done(self, request_id: str, now: float) -> str | None:
        """The request ended (completed, cancelled or failed for good): frees its slot.
        Returns the backend's URL when that was the last request of a draining backend,
        now forgotten (stop its scraper and probes); else None."""
        a = self._attempts.get(request_id)
        if a is None:
            return None
        url = a.backend
        self._leave(request_id, a)
        return url if url in self._backends and self._drop_if_drained(url) else None

    def _leave(self, request_id: str, a: _Attempt) -> None:
        del self._attempts[request_id]
        b = self._backends.get(a.backend)
        if b is not None and b.requests.pop(request_id, None) is not None:
            b.tokens -= a.req.tokens
        if a.retry:
            self.budget.on_retry_done()

    # -- observability ----------------------------------------------------------------

    def ready(self, now: float) -> bool:
        """At least one active backend with a closed circuit whose last probe answered."""
        return any(
            self._backends[u].health.breaker.state(now) is CircuitState.CLOSED
            and self._backends[u].health.up
            for u in self._members.active
        )

    def down(self, now: float) -> bool:
        """Backends are listed and none is healthy (an outage, not a fleet scaled to zero)."""
        return bool(self._members.active) and not self.ready(now)

    def stats(self, now: float) -> list[BackendStats]:
        out = []
        for url in self.backends:
            b = self._backends[url]
            state = b.health.breaker.state(now)
            out.append(
                BackendStats(
                    url=url,
                    active=self._members.is_active(url),
                    up=b.health.up,
                    healthy=state is CircuitState.CLOSED,
                    circuit=state,
                    in_flight=len(b.requests),
                    in_flight_tokens=b.tokens,
                    routed=b.routed,
                    failovers=b.failovers,
                    failures=dict(b.failures),
                    metrics_age_s=None if b.metrics_at is None else now - b.metrics_at,
                    seconds_per_token=b.seconds_per_token,
                )
            )
        return out
