"""Per-backend Prometheus metrics (label `backend`: its name, not its URL), read from the
fleet at scrape time.

Register `FleetCollector` on the gateway's registry: every figure comes from
`Fleet.stats` (and the shared state's flags) when /metrics is read, so it can never drift
from the state the decisions used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.health import CIRCUIT_CODES
from burstguard.core.fleet.names import BackendNames
from burstguard.live.gateway.shared_state import SharedState


class FleetCollector(Collector):
    def __init__(
        self, fleet: Fleet, clock: Callable[[], float], shared: SharedState | None = None,
        names: Callable[[str], str] | None = None,
    ) -> None:  # fmt: skip
        """`names`: each backend's label (`core.fleet.names`: never its URL by default)."""
        self._fleet = fleet
        self._clock = clock
        self._shared = shared
        self._names = names or BackendNames(())

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        stats = self._fleet.stats(now)
        lb = ["backend"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"burstguard_backend_{name}", doc, labels=lb)

        up = gauge("up", "1 when the last /health probe answered 2xx")
        healthy = gauge("healthy", "1 when the circuit breaker is closed")
        circuit = gauge("circuit_state", "0 closed, 1 half-open, 2 open")
        active = gauge("active", "1 while discovery lists it, 0 while it drains")
        in_flight = gauge("in_flight", "This gateway's requests on it")
        tokens = gauge("in_flight_tokens", "Their prompt + predicted output tokens")
        age = gauge("metrics_age_seconds", "Age of its last good /metrics scrape")
        speed = gauge("seconds_per_token", "Its streams' recent time per output token (score)")
        routed = CounterMetricFamily(
            "burstguard_backend_routed", "Requests sent to it, failovers included", labels=lb
        )
        failovers = CounterMetricFamily(
            "burstguard_backend_failovers",
            "Requests that failed on it and went elsewhere",
            labels=lb,
        )
        failures = CounterMetricFamily(
            "burstguard_backend_failures",
            "Passive failures (connect, reset, status_5xx, timeout, bad_answer)",
            labels=[*lb, "reason"],
        )
        for s in stats:
            b = [self._names(s.url)]
            up.add_metric(b, float(s.up))
            healthy.add_metric(b, float(s.healthy))
            circuit.add_metric(b, CIRCUIT_CODES[s.circuit])
            active.add_metric(b, float(s.active))
            in_flight.add_metric(b, s.in_flight)
            tokens.add_metric(b, s.in_flight_tokens)
            if s.metrics_age_s is not None:
                age.add_metric(b, s.metrics_age_s)
            if s.seconds_per_token is not None:
                speed.add_metric(b, s.seconds_per_token)
            routed.add_metric(b, s.routed)
            failovers.add_metric(b, s.failovers)
            for reason, n in s.failures.items():
                failures.add_metric([*b, reason], n)
        yield from (up, healthy, circuit, active, in_flight, tokens, age, speed, routed, failovers)
        yield failures
        outcomes = CounterMetricFamily(
            "burstguard_failover_outcomes",
            "What became of requests whose backend failed: failover, budget, no_backend, "
            "no_room, not_retryable",
            labels=["outcome"],
        )
        for outcome, n in self._fleet.failover_outcomes.items():
            outcomes.add_metric([outcome], n)
        yield outcomes
        yield GaugeMetricFamily(
            "burstguard_ready_backends",
            "Active backends with a closed circuit and a good last probe (/ready while > 0)",
            value=sum(s.active and s.healthy and s.up for s in stats),
        )
        if self._shared is not None:
            yield GaugeMetricFamily(
                "burstguard_shared_state_degraded",
                "1 while Redis is unreachable and local caps (cap / replicas) apply",
                value=float(self._shared.degraded),
            )
            yield CounterMetricFamily(
                "burstguard_shared_state_errors",
                "Redis calls that failed (each one degrades until rejoin)",
                value=self._shared.errors,
            )
