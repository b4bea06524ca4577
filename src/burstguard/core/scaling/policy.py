"""What every autoscaler policy is to its driver: ticks in, a desired replica count out.

A driver (the simulator's event heap, the live gateway's timer) calls `tick` at
`next_tick_at()` with the metrics it would export at that moment (`signals`: metric name
-> value summed over its label sets, counters as running totals) and the fleet's counts.
The policy answers with a `Decision` when the desired count changes, else None. Policies
keep their own memory (windows, histories) and never read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from burstguard.core.scaling.replica_pool import FleetCounts

__all__ = ["Autoscaler", "Decision", "Signals"]

Signals = Mapping[str, float]
"""Metric name -> value (summed over label sets); counters as running totals."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A new desired replica count, why, and the figures behind it (for logs and gauges)."""

    time: float
    desired: int
    reason: str
    detail: Mapping[str, float] = field(default_factory=dict)


class Autoscaler(Protocol):
    """An autoscaler policy core (KEDA+HPA, KPA, predictive)."""

    @property
    def desired(self) -> int:
        """The replica count it currently asks for (`burstguard_desired_replicas`)."""
        ...

    @property
    def gauges(self) -> Mapping[str, float]:
        """Figures worth exporting (metric value, forecast, panic mode...)."""
        ...

    def next_tick_at(self) -> float:
        """When it next wants `tick` (a sample or a decision is due)."""
        ...

    def tick(self, now: float, signals: Signals, fleet: FleetCounts) -> Decision | None:
        """Sample what is due, decide if due; a Decision when the desired count changes."""
        ...
