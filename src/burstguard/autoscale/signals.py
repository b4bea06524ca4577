"""The autoscaler's inputs as the gateway exports them, from the core's own state.

One function for the simulator and the live gateway, so both feed a policy the same
figures: each metric summed over its label sets, counters as running totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

__all__ = ["SIGNAL_NAMES", "GatewayFigures", "gateway_signals"]


class GatewayFigures(Protocol):
    """What the signals are read from: the gateway core's `GatewayStats` (a protocol, so
    that the gateway imports the autoscaler and not the other way round)."""

    @property
    def queue_depth(self) -> Mapping[str, int]: ...
    @property
    def in_flight_requests(self) -> int: ...
    @property
    def outcomes(self) -> Mapping[str, Mapping[str, int]]: ...


SIGNAL_NAMES = (
    "llm_request_queue_depth",
    "burstguard_in_flight_requests",
    "burstguard_arrivals_total",
    "llm_request_total",
)


def gateway_signals(stats: GatewayFigures, arrivals: int) -> dict[str, float]:
    """What /metrics shows now: queue (all classes), in flight, arrivals and outcomes."""
    return {
        "llm_request_queue_depth": float(sum(stats.queue_depth.values())),
        "burstguard_in_flight_requests": float(stats.in_flight_requests),
        "burstguard_arrivals_total": float(arrivals),
        "llm_request_total": float(sum(sum(o.values()) for o in stats.outcomes.values())),
    }
