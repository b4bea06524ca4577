"""Knative's Pod Autoscaler (KPA): concurrency per pod over a stable and a panic window.

Ported from knative/serving pkg/autoscaler/scaling/autoscaler.go (`Scale`):

- concurrency (requests queued or in flight) is sampled every second; the stable value is
  its average over `stable_window_s` (60 s), the panic value over `panic_window_s` (6 s,
  10% of stable);
- desired = ceil(observed / (target_concurrency x target_utilization)), bounded by
  max-scale-up-rate x ready and ready / max-scale-down-rate;
- panic starts when the panic desired count / ready >= `panic_threshold` (200%), is
  extended while it stays there, and ends one stable window after the last time; while
  panicking the count never goes down (it holds the highest panic count);
- `scale_down_delay_s` holds a decrease for that long (max over the window), and a scale
  to zero waits `scale_to_zero_grace_s` (30 s) of wanting zero.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pydantic import ConfigDict

from burstguard.core.scaling.policy import Decision, Signals
from burstguard.core.scaling.replica_pool import FleetCounts

__all__ = ["KpaAutoscaler", "KpaParams"]

CONCURRENCY_METRICS = ("llm_request_queue_depth", "burstguard_in_flight_requests")


@dataclass(frozen=True, slots=True)
class KpaParams:
    """Knative autoscaler settings (config-autoscaler keys, in seconds and fractions)."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    target_concurrency: float = 100.0  # container-concurrency-target-default
    target_utilization: float = 0.7  # container-concurrency-target-percentage 70
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0  # panic-window-percentage 10% of 60 s
    panic_threshold: float = 2.0  # panic-threshold-percentage 200
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    min_replicas: int = 0  # min-scale; 0 with enable-scale-to-zero
    max_replicas: int = 100
    scale_to_zero_grace_s: float = 30.0
    scale_down_delay_s: float = 0.0
    tick_interval_s: float = 2.0
    sample_interval_s: float = 1.0
    metrics: tuple[str, ...] = CONCURRENCY_METRICS  # summed: the concurrency

    def __post_init__(self) -> None:
        if self.target_concurrency <= 0 or not 0 < self.target_utilization <= 1:
            raise ValueError("need target_concurrency > 0 and 0 < target_utilization <= 1")
        if not 0 < self.panic_window_s <= self.stable_window_s:
            raise ValueError("need 0 < panic_window_s <= stable_window_s")
        if (
            self.panic_threshold <= 1
            or self.max_scale_up_rate <= 1
            or self.max_scale_down_rate <= 1
        ):
            raise ValueError("panic_threshold, max_scale_up_rate, max_scale_down_rate must be > 1")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.tick_interval_s <= 0 or self.sample_interval_s <= 0 or not self.metrics:
            raise ValueError("need tick_interval_s > 0, sample_interval_s > 0 and a metric")

    @property
    def target(self) -> float:
        return self.target_concurrency * self.target_utilization


class KpaAutoscaler:
    """The KPA decider for one revision."""

    def __init__(self, params: KpaParams, *, initial_replicas: int, start: float = 0.0) -> None:
        self.params = params
        self._samples: deque[tuple[float, float]] = deque()
        self._next_sample = start
        self._next_decide = start
        self._panic_since: float | None = None  # Knative's panicTime: last time over threshold
        self._max_panic = 0
        self._delay: deque[tuple[float, int]] = deque()  # for scale_down_delay_s
        self._zero_since: float | None = None
        self._desired = initial_replicas
        self._stable = self._panic = 0.0

    @property
    def desired(self) -> int:
        return self._desired

    @property
    def panicking(self) -> bool:
        return self._panic_since is not None

    @property
    def gauges(self) -> Mapping[str, float]:
        return {
            "stable_concurrency": self._stable,
            "panic_concurrency": self._panic,
            "panic": float(self.panicking),
        }

    def next_tick_at(self) -> float:
        return min(self._next_sample, self._next_decide)

    def tick(self, now: float, signals: Signals, fleet: FleetCounts) -> Decision | None:
        p = self.params
        if now >= self._next_sample:
            self._samples.append((now, sum(signals.get(m, 0.0) for m in p.metrics)))
            while self._samples and self._samples[0][0] <= now - p.stable_window_s:
                self._samples.popleft()
            self._next_sample = now + p.sample_interval_s
        if now < self._next_decide:
            return None
        self._next_decide = now + p.tick_interval_s
        new, reason = self._scale(now, fleet.ready)
        if new == self._desired:
            return None
        self._desired = new
        return Decision(now, new, reason, dict(self.gauges))

    def _average(self, now: float, window: float) -> float:
        vals = [v for t, v in self._samples if t > now - window]
        return sum(vals) / len(vals) if vals else 0.0

    def _scale(self, now: float, ready_pods: int) -> tuple[int, str]:
        p = self.params
        ready = max(1, ready_pods)
        self._stable = self._average(now, p.stable_window_s)
        self._panic = self._average(now, p.panic_window_s)
        max_up = math.ceil(p.max_scale_up_rate * ready)
        max_down = math.floor(ready / p.max_scale_down_rate)
        dspc = math.ceil(self._stable / p.target)
        dppc = math.ceil(self._panic / p.target)
        stable_count = int(min(max(dspc, max_down), max_up))
        panic_count = int(min(max(dppc, max_down), max_up))
        over = dppc / ready >= p.panic_threshold
        if over:
            self._panic_since = now
        elif self._panic_since is not None and now - self._panic_since > p.stable_window_s:
            self._panic_since, self._max_panic = None, 0
        desired, reason = stable_count, "kpa: stable window"
        if self._panic_since is not None:
            self._max_panic = max(self._max_panic, desired, panic_count)
            desired, reason = self._max_panic, "kpa: panic (no scale-down)"
        desired = self._delayed(desired, now)
        desired = min(max(desired, p.min_replicas), p.max_replicas)
        if desired == 0 and self._desired > 0:
            if self._zero_since is None:
                self._zero_since = now
            if now - self._zero_since < p.scale_to_zero_grace_s:
                return self._desired, reason
            return 0, "kpa: idle past the scale-to-zero grace period"
        self._zero_since = None
        return desired, reason

    def _delayed(self, desired: int, now: float) -> int:
        """scale-down-delay: the highest count asked for within the delay window."""
        if self.params.scale_down_delay_s <= 0:
            return desired
        self._delay.append((now, desired))
        while self._delay[0][0] <= now - self.params.scale_down_delay_s:
            self._delay.popleft()
        return max(v for _, v in self._delay)
