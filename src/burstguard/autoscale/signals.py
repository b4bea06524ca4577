"""The autoscaler's inputs as the gateway exports them, from the core's own state.

One function for the simulator and the live gateway, so both feed a policy the same
figures: each metric summed over its label sets, counters as running totals.
"""

from __future__ import annotations

from burstguard.gateway.core import GatewayStats

__all__ = ["SIGNAL_NAMES", "gateway_signals"]

SIGNAL_NAMES = (
    "llm_request_queue_depth",
    "burstguard_in_flight_requests",
    "burstguard_arrivals_total",
    "llm_request_total",
)


def gateway_signals(stats: GatewayStats, arrivals: int) -> dict[str, float]:
    """What /metrics shows now: queue (all classes), in flight, arrivals and outcomes."""
    return {
        "llm_request_queue_depth": float(sum(stats.queue_depth.values())),
        "burstguard_in_flight_requests": float(stats.in_flight_requests),
        "burstguard_arrivals_total": float(arrivals),
        "llm_request_total": float(sum(sum(o.values()) for o in stats.outcomes.values())),
    }
