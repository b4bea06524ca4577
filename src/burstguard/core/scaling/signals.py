"""The autoscaler's inputs as the gateway exports them, from the core's own state.

One function for the simulator and the live gateway, so both feed a policy the same
figures: each metric summed over its label sets, counters as running totals; the
backends' gauges as the gateway's /metrics shows them (waiting and running summed over
the fleet, KV usage averaged), from the core's last scrape of each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SIGNAL_NAMES", "BackendGauges", "GatewayFigures", "WorkCounts", "gateway_signals"]


class GatewayFigures(Protocol):
    """What the signals are read from: the gateway core's `GatewayStats` (a protocol, so
    that the gateway imports the autoscaler and not the other way round)."""

    @property
    def queue_depth(self) -> Mapping[str, int]: ...
    @property
    def in_flight_requests(self) -> int: ...
    @property
    def outcomes(self) -> Mapping[str, Mapping[str, int]]: ...


class BackendGauges(Protocol):
    """A backend's own gauges as the gateway last scraped them (`BackendState`)."""

    @property
    def waiting(self) -> int | None: ...
    @property
    def running(self) -> int | None: ...
    @property
    def kv_usage(self) -> float | None: ...


@dataclass(slots=True)
class WorkCounts:
    """Token work as running totals, kept by each shell (live server, simulator) so the
    autoscaler reads the same counters in both: prompt tokens as requests arrive (the
    prefill asked for), those of requests the backend refused (never served), and the
    requests completed with their prompt and output tokens (the work served)."""

    prompt_tokens: int = 0
    refused_prompt_tokens: int = 0
    completed_requests: int = 0
    completed_prompt_tokens: int = 0
    output_tokens: int = 0

    def arrived(self, prompt_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens

    def refused(self, prompt_tokens: int) -> None:
        self.refused_prompt_tokens += prompt_tokens

    def completed(self, prompt_tokens: int, output_tokens: int) -> None:
        self.completed_requests += 1
        self.completed_prompt_tokens += prompt_tokens
        self.output_tokens += output_tokens


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
    stats: GatewayFigures,
    arrivals: int,
    work: WorkCounts | None = None,
    backends: Iterable[BackendGauges] = (),
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
