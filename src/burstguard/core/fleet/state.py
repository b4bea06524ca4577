"""A backend's own gauges as the gateway last scraped them.

The fleet owns per-backend state (load, health, these gauges); the gateway core and the
autoscaler read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class BackendState:
    """The backend's own view, scraped from its /metrics; None where it exports nothing."""

    waiting: int | None = None
    running: int | None = None
    kv_usage: float | None = None  # 0..1

    def __init__(
        self, waiting: int | None = None, running: int | None = None, kv_usage: float | None = None
    ) -> None:
        self.waiting = waiting
        self.running = running
        self.kv_usage = kv_usage
