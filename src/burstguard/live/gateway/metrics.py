"""The gateway's Prometheus metrics (/metrics).

`llm_request_queue_depth` and `llm_request_total` carry the names a KEDA ScaledObject
queries (the seed's example); everything else is `burstguard_*`. Counters and histograms
are updated as events happen; gauges (queue, in-flight, caps, backend state) are read from
a snapshot at scrape time, so they can never drift from the core's own state.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from burstguard.client.retry import RETRY_COUNT_HEADER
from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.core import GatewayCore
from burstguard.core.scaling.signals import WorkCounts
from burstguard.wire.outcomes import Outcome

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_OWN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
# Retry-After is whole seconds, at least 1 (errors.retry_after_header): seconds to minutes
_RETRY_AFTER_BUCKETS = (1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)


def is_retry(headers: Mapping[str, str]) -> bool:
    """Whether the client says this request is a retry: `x-stainless-retry-count` (the
    OpenAI/Anthropic SDKs, burstguard's client and bench) above 0. One lookup; garbage is
    not a retry."""
    count = headers.get(RETRY_COUNT_HEADER)
    return count is not None and count != "0" and count.isdigit()


class ArrivalWindows:
    """Arrival counts per second over the last `horizon_s`: rates and burst indexes.

    The burst index of a bin size is peak / mean of the arrivals per bin over the complete
    bins of the horizon (1 = perfectly even; the seed calls > 5 a bursty service).
    """

    def __init__(self, horizon_s: int = 60) -> None:
        self.horizon_s = horizon_s
        self._bins: deque[list[int]] = deque()  # [second, count], oldest first

    def add(self, now: float) -> None:
        sec = math.floor(now)
        if self._bins and self._bins[-1][0] == sec:
            self._bins[-1][1] += 1
        else:
            self._bins.append([sec, 1])
        self._trim(sec)

    def _trim(self, sec: int) -> None:
        while self._bins and self._bins[0][0] <= sec - self.horizon_s:
            self._bins.popleft()

    def _counts(self, now: float, span_s: int) -> list[int]:
        """Arrivals in each of the last `span_s` complete seconds before `now`."""
        end = math.floor(now)
        counts = dict((s, c) for s, c in self._bins if end - span_s <= s < end)
        return [counts.get(s, 0) for s in range(end - span_s, end)]

    def rate(self, now: float, window_s: int) -> float:
        """Mean arrivals per second over the last `window_s` complete seconds."""
        return sum(self._counts(now, window_s)) / window_s

    def burst_index(self, now: float, bin_s: int) -> float:
        per_sec = self._counts(now, self.horizon_s - self.horizon_s % bin_s)
        bins = [sum(per_sec[i : i + bin_s]) for i in range(0, len(per_sec), bin_s)]
        mean = sum(bins) / len(bins) if bins else 0.0
        return max(bins) / mean if mean > 0 else 0.0


@dataclass(frozen=True, slots=True)
class GaugeSnapshot:
    """What the gauges show, taken from the core and the backend poller at scrape time."""

    queue_depth: Mapping[str, int]
    queue_tokens: int
    in_flight: int
    in_flight_tokens: int
    in_flight_cap: int | None = None
    in_flight_tokens_cap: int | None = None
    service_rate: float | None = None
    backend_waiting: float | None = None
    backend_running: float | None = None
    backend_kv_usage: float | None = None
    fairness_tenants: Mapping[str, int] = field(default_factory=dict)  # class -> tracked
    tenant_overflow: Mapping[str, int] = field(default_factory=dict)  # class -> total
    quota_buckets: int | None = None  # local quota buckets (None: no quotas configured)
    quota_local_share: int | None = None  # N while quotas are enforced locally as quota/N
    extra: Mapping[str, float] = field(default_factory=dict)


def core_snapshot(core: GatewayCore, quota_local_share: int | None = None) -> GaugeSnapshot:
    """The gauges of a core (the standalone gateway's and the Endpoint Picker's alike);
    `quota_local_share`: the shell's word on Redis (`GaugeSnapshot.quota_local_share`)."""
    s = core.stats
    states = list(core.backend_states.values())
    b = _total(states) if states else None
    return GaugeSnapshot(
        queue_depth=s.queue_depth,
        queue_tokens=sum(s.queue_tokens.values()),
        in_flight=s.in_flight_requests,
        in_flight_tokens=s.in_flight_tokens,
        in_flight_cap=int(s.limit_requests),
        in_flight_tokens_cap=None if math.isinf(s.limit_tokens) else int(s.limit_tokens),
        service_rate=s.service_rate,
        backend_waiting=None if b is None or b.waiting is None else float(b.waiting),
        backend_running=None if b is None or b.running is None else float(b.running),
        backend_kv_usage=b.kv_usage if b is not None else None,
        fairness_tenants=s.fairness_tenants,
        tenant_overflow=s.tenant_overflow,
        quota_buckets=s.quota_buckets if core.quotas.enabled else None,
        quota_local_share=quota_local_share,
    )


def _total(states: list[BackendState]) -> BackendState:
    """The fleet's engines as one: waiting and running summed, KV usage averaged."""

    def add(xs: list[int | None]) -> int | None:
        known = [x for x in xs if x is not None]
        return sum(known) if known else None

    kv = [st.kv_usage for st in states if st.kv_usage is not None]
    return BackendState(
        add([st.waiting for st in states]),
        add([st.running for st in states]),
        sum(kv) / len(kv) if kv else None,
    )


class _SnapshotCollector(Collector):
    def __init__(
        self,
        snapshot: Callable[[], GaugeSnapshot],
        windows: ArrivalWindows,
        clock: Callable[[], float],
    ) -> None:
        self._snapshot = snapshot
        self._windows = windows
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        depth = GaugeMetricFamily(
            "llm_request_queue_depth", "Requests waiting in the gateway queue", labels=["class"]
        )
        for name, n in s.queue_depth.items():
            depth.add_metric([name], n)
        yield depth
        yield _gauge(
            "burstguard_queue_tokens", "Tokens (prompt + predicted output) queued", s.queue_tokens
        )
        yield _gauge(
            "burstguard_in_flight_requests", "Requests released to the backend", s.in_flight
        )
        yield _gauge(
            "burstguard_in_flight_tokens",
            "Tokens (prompt + predicted output) of in-flight requests",
            s.in_flight_tokens,
        )
        optional = {
            "burstguard_in_flight_cap": (
                "Current (adapted) in-flight request cap",
                s.in_flight_cap,
            ),
            "burstguard_in_flight_tokens_cap": (
                "Current (adapted) in-flight token budget",
                s.in_flight_tokens_cap,
            ),
            "burstguard_service_rate": (
                "Measured service rate (tokens or requests per s)",
                s.service_rate,
            ),
            "burstguard_backend_waiting_requests": (
                "Backend's own waiting queue (scraped)",
                s.backend_waiting,
            ),
            "burstguard_backend_running_requests": (
                "Backend's running requests (scraped)",
                s.backend_running,
            ),
            "burstguard_backend_kv_cache_usage": (
                "Backend's KV cache usage 0-1 (scraped)",
                s.backend_kv_usage,
            ),
        }
        for name, (doc, value) in optional.items():
            if value is not None:
                yield _gauge(name, doc, value)
        now = self._clock()
        rate = GaugeMetricFamily(
            "burstguard_arrival_rate", "Arrivals per second over the window", labels=["window"]
        )
        for w in (1, 10, 60):
            rate.add_metric([f"{w}s"], self._windows.rate(now, w))
        yield rate
        burst = GaugeMetricFamily(
            "burstguard_burst_index",
            "Peak-to-average of arrivals per bin over the last 60 s",
            labels=["window"],
        )
        for b in (1, 5):
            burst.add_metric([f"{b}s"], self._windows.burst_index(now, b))
        yield burst
        tracked = GaugeMetricFamily(
            "burstguard_fairness_tenants",
            "Tenants whose fairness state is kept (active + recently idle), by class",
            labels=["class"],
        )
        for name, n in s.fairness_tenants.items():
            tracked.add_metric([name], n)
        yield tracked
        overflow = CounterMetricFamily(
            "burstguard_tenant_overflow",
            "Requests queued as the shared tenant ~overflow (limits.max_queued_tenants "
            "other tenants were queued in their class), by class",
            labels=["class"],
        )
        for name, n in s.tenant_overflow.items():
            overflow.add_metric([name], n)
        yield overflow
        if s.quota_buckets is not None:  # no label per tenant: tenant ids are the client's
            yield _gauge(
                "burstguard_quota_buckets",
                "Quota buckets this gateway holds itself (bounded by quotas.max_buckets)",
                s.quota_buckets,
            )
        if s.quota_local_share is not None:
            yield _gauge(
                "burstguard_quota_local_share",
                "1 while quotas are charged in the shared store (fleet.redis); N "
                "(fleet.redis.replicas) while Redis is unreachable and this replica enforces "
                "quota/N alone",
                s.quota_local_share,
            )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class GatewayMetrics:
    """Owns a private registry, so several gateways (tests) never share counters."""

    def __init__(self, snapshot: Callable[[], GaugeSnapshot], clock: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.windows = ArrivalWindows()
        self._clock = clock
        r = self.registry
        self.requests = Counter(
            "llm_request", "Requests by class and final outcome", ["class", "outcome"], registry=r
        )
        self.arrivals = Counter(
            "burstguard_arrivals", "Requests that arrived, by class", ["class"], registry=r
        )
        self.retried = Counter(
            "burstguard_retried_requests",
            "Arrivals that their client marks as a retry (x-stainless-retry-count > 0), by class",
            ["class"],
            registry=r,
        )
        self.rejections = Counter(
            "burstguard_rejections",
            "Requests shed with 429, by reason",
            ["class", "reason"],
            registry=r,
        )
        self.retry_after = Histogram(
            "burstguard_retry_after_seconds",
            "The Retry-After each 429 tells its client (whole seconds), by class",
            ["class"],
            buckets=_RETRY_AFTER_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "burstguard_upstream_errors", "Backend failures, by kind", ["kind"], registry=r
        )
        self.invalid = Counter(
            "burstguard_invalid_requests",
            "Requests refused before admission (400, 401, 413), by status",
            ["status"],
            registry=r,
        )
        self.refused = Counter(
            "burstguard_connections_refused",
            "Client connections refused or cut because a client broke a limit (max_connections,"
            " head_timeout, body_timeout, head_too_large, too_many_headers, body_too_large,"
            " client_stalled, bad_http), by reason",
            ["reason"],
            registry=r,
        )
        self.output_tokens = Counter(
            "burstguard_output_tokens", "Output tokens streamed to clients", ["class"], registry=r
        )
        self.prompt_tokens = Counter(
            "burstguard_prompt_tokens",
            "Prompt tokens of arriving requests (prefill work asked for), by class",
            ["class"],
            registry=r,
        )
        self.refused_prompt_tokens = Counter(
            "burstguard_refused_prompt_tokens",
            "Prompt tokens of requests the backend refused (4xx: work never to be served)",
            ["class"],
            registry=r,
        )
        self.completed_requests = Counter(
            "burstguard_completed_requests",
            "Requests completed, by class (with their tokens: the mix served)",
            ["class"],
            registry=r,
        )
        self.completed_prompt_tokens = Counter(
            "burstguard_completed_prompt_tokens",
            "Prompt tokens of completed requests (prefill work served), by class",
            ["class"],
            registry=r,
        )
        self.work = WorkCounts()  # the same totals, unlabelled, for the autoscaler
        self.preemptions = Counter(
            "burstguard_preemptions",
            "In-flight requests preempted for a better class (the gateway resumes them later; "
            "behind the picker, `epp.preempt: end`, they end with an error)",
            ["class"],
            registry=r,
        )
        self.reprefill_tokens = Counter(
            "burstguard_reprefill_tokens",
            "Tokens sent again to resume preempted requests (prompt + text so far): the "
            "prefill work preemption costs",
            registry=r,
        )
        self.queue_wait = Histogram(
            "burstguard_queue_wait_seconds",
            "Time from arrival to release to the backend",
            ["class"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "burstguard_ttft_seconds",
            "Time from arrival at the gateway to the first output token",
            ["class"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.own_time = Histogram(
            "burstguard_first_token_own_seconds",
            "The gateway's own time on a stream's first-token path: request read to its "
            "upstream write (queue wait excluded), plus the backend's first bytes read to "
            "their write to the client; the rest of TTFT is the backend's and the network's",
            buckets=_OWN_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "burstguard_event_loop_lag_seconds",
            "How late the gateway's 50 ms tick ran (ms timer resolution): time every waiting "
            "request and relayed chunk also waits when the process is busy",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        r.register(_SnapshotCollector(snapshot, self.windows, clock))
        # The per-request metrics' children, each looked up once: `labels()` checks its
        # values and takes a lock on every call (~1 us, five times a request), and these
        # values (classes, outcomes, shed reasons) are few and fixed by the config.
        self.arrivals_of = functools.cache(self.arrivals.labels)
        self.retried_of = functools.cache(self.retried.labels)
        self.requests_of = functools.cache(self.requests.labels)
        self.rejections_of = functools.cache(self.rejections.labels)
        self.retry_after_of = functools.cache(self.retry_after.labels)
        self.output_tokens_of = functools.cache(self.output_tokens.labels)
        self.prompt_tokens_of = functools.cache(self.prompt_tokens.labels)
        self.completed_prompt_tokens_of = functools.cache(self.completed_prompt_tokens.labels)
        self.completed_requests_of = functools.cache(self.completed_requests.labels)
        self.preemptions_of = functools.cache(self.preemptions.labels)
        self.queue_wait_of = functools.cache(self.queue_wait.labels)
        self.ttft_of = functools.cache(self.ttft.labels)

    def arrived(self, cls: str, retry: bool) -> None:
        self.arrivals_of(cls).inc()
        if retry:
            self.retried_of(cls).inc()
        self.windows.add(self._clock())

    def prompt_arrived(self, cls: str, prompt_tokens: int) -> None:
        self.prompt_tokens_of(cls).inc(prompt_tokens)
        self.work.arrived(prompt_tokens)

    def completed(self, cls: str, prompt_tokens: int, output_tokens: int) -> None:
        """A completed request's tokens: the work it took served."""
        self.output_tokens_of(cls).inc(output_tokens)
        self.completed_requests_of(cls).inc()
        self.completed_prompt_tokens_of(cls).inc(prompt_tokens)
        self.work.completed(prompt_tokens, output_tokens)

    def refused_work(self, cls: str, prompt_tokens: int) -> None:
        """The backend refused a request (4xx): its prompt will never be served."""
        self.refused_prompt_tokens.labels(cls).inc(prompt_tokens)
        self.work.refused(prompt_tokens)

    def shed(self, cls: str, retry_after_s: int) -> None:
        """A 429 sent, with the Retry-After its client was told."""
        self.retry_after_of(cls).observe(retry_after_s)

    def ended(self, cls: str, outcome: Outcome, reason: str | None = None) -> None:
        """The request's one outcome (`llm_request_total`); a shed one's reason too."""
        self.requests_of(cls, outcome).inc()
        if outcome is Outcome.REJECTED:
            self.rejections_of(cls, reason or "unknown").inc()

    def limit_tripped(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
