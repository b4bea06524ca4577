"""One policy and one fleet, run together: what the simulator and the live gateway drive.

The driver asks `next_event_at()`, and at that time calls `advance(now, signals)` with
the metrics it exports at that moment; it carries out the returned fleet effects (start a
replica, route to a ready one, drain, stop) and reports back `drained(...)` (and, live,
`mark_ready(...)`). `decisions` and `fleet.history` are the scale events and the
replicas series a summary reports; `desired` is `burstguard_desired_replicas`.
"""

from __future__ import annotations

from typing import Any

from burstguard.core.scaling.policy import Autoscaler, Decision, Signals
from burstguard.core.scaling.replica_pool import FleetEffect, ReplicaPool

__all__ = ["ScalingController"]


class ScalingController:
    """Ticks the policy when due and applies its decisions to the fleet."""

    def __init__(self, policy: Autoscaler, fleet: ReplicaPool) -> None:
        self.policy = policy
        self.fleet = fleet
        self.decisions: list[Decision] = []
        if fleet.desired != policy.desired:
            raise ValueError("the fleet and the policy must start at the same desired count")

    @property
    def desired(self) -> int:
        return self.policy.desired

    def next_event_at(self) -> float:
        return min(self.policy.next_tick_at(), self.fleet.next_event_at())

    def advance(self, now: float, signals: Signals) -> list[FleetEffect]:
        """Replicas that became ready or timed out draining, then the policy's decision."""
        effects = self.fleet.advance(now)
        if now >= self.policy.next_tick_at():
            decision = self.policy.tick(now, signals, self.fleet.counts())
            if decision is not None:
                self.decisions.append(decision)
                effects += self.fleet.scale_to(decision.desired, now)
        return effects

    def report(self, now: float) -> dict[str, Any]:
        """The books a summary carries: `replica_seconds` up to `now`, the `replicas`
        series (desired, starting, ready, draining from each time on) and `scale_events`."""
        hist = self.fleet.history
        return {
            "replica_seconds": self.fleet.replica_seconds(now),
            "replicas": {
                "t": [h.time for h in hist],
                "desired": [h.desired for h in hist],
                "starting": [h.starting for h in hist],
                "ready": [h.ready for h in hist],
                "draining": [h.draining for h in hist],
            },
            "scale_events": [
                {"t": d.time, "desired": d.desired, "reason": d.reason, **dict(d.detail)}
                for d in self.decisions
            ],
        }

    def mark_ready(self, replica_id: int, now: float) -> list[FleetEffect]:
        return self.fleet.mark_ready(replica_id, now)

    def drained(self, replica_id: int, now: float) -> list[FleetEffect]:
        return self.fleet.drained(replica_id, now)
