"""The autoscaler's inputs as the gateway exports them, from the core's own state.

One function for the simulator and the live gateway, so both feed a policy the same
figures: each metric summed over its label sets, counters as running totals; the
backends' gauges as the gateway's /metrics shows them (waiting and running summed over
the fleet, KV usage averaged), from the core's last scrape of each.
"""

from __future__ import annotations

from collections.abc import Iterable

from burstguard.gateway.core import GatewayStats
from burstguard.gateway.metrics import WorkCounts
from burstguard.gateway.request import BackendState

__all__ = ["SIGNAL_NAMES", "gateway_signals"]

SIGNAL_NAMES = (
    "llm_request_queue_depth",
    "burstguard_in_flight_requests",
    "burstguard_arrivals_total",
    "llm_request_total",
    "burstguard_prompt_tokens_total",
    "burstguard_refused_prompt_tokens_total",
    "burstguard_completed_requests_total",
    "burstguard_completed_prompt_tokens_total",
    "burstguard_output_tokens_total",
    "burstguard_backend_waiting_requests",
    "burstguard_backend_running_requests",
    "burstguard_backend_kv_cache_usage",
)


def gateway_signals(
    stats: GatewayStats,
    arrivals: int,
    work: WorkCounts | None = None,
    backends: Iterable[BackendState] = (),
) -> dict[str, float]:
    """What /metrics shows now: queue (all classes), in flight, arrivals and outcomes,
    token work (when the shell counts it) and the backends' own gauges (when scraped)."""
    out = {
        "llm_request_queue_depth": float(sum(stats.queue_depth.values())),
        "burstguard_in_flight_requests": float(stats.in_flight_requests),
        "burstguard_arrivals_total": float(arrivals),
        "llm_request_total": float(sum(sum(o.values()) for o in stats.outcomes.values())),
    }
    if work is not None:
        out["burstguard_prompt_tokens_total"] = float(work.prompt_tokens)
        out["burstguard_refused_prompt_tokens_total"] = float(work.refused_prompt_tokens)
        out["burstguard_completed_requests_total"] = float(work.completed_requests)
        out["burstguard_completed_prompt_tokens_total"] = float(work.completed_prompt_tokens)
        out["burstguard_output_tokens_total"] = float(work.output_tokens)
    states = list(backends)
    waiting = [s.waiting for s in states if s.waiting is not None]
    running = [s.running for s in states if s.running is not None]
    kv = [s.kv_usage for s in states if s.kv_usage is not None]
    if waiting:
        out["burstguard_backend_waiting_requests"] = float(sum(waiting))
    if running:
        out["burstguard_backend_running_requests"] = float(sum(running))
    if kv:
        out["burstguard_backend_kv_cache_usage"] = sum(kv) / len(kv)
    return out
