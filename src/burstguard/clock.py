"""An instant shared between processes: a Unix time given on a command line (`--start-at`),
placed on this process's monotonic clock.

Separate processes that must run one schedule (a bench client sending a workload, a local
fleet deciding on it) start their time zero at the same instant this way, so their times
(engine seconds since zero) name the same moments — as one simulator's clock does.
"""

from __future__ import annotations

import math
import time

from burstguard.errors import ConfigError

__all__ = ["check_start_at", "monotonic_at", "schedule_origin"]


def check_start_at(start_at: float | None) -> None:
    """`--start-at` is a Unix time still to come (nan, and inf, which would wait for ever,
    are refused too)."""
    if start_at is None:
        return
    if not math.isfinite(start_at):
        raise ConfigError(f"--start-at {start_at}: not a Unix time (now {time.time():.1f})")
    if start_at <= time.time():
        raise ConfigError(f"--start-at {start_at}: that time has passed (now {time.time():.1f})")


def monotonic_at(unix_s: float) -> float:
    """The monotonic-clock reading at Unix time `unix_s` (past or future)."""
    return time.monotonic() + (unix_s - time.time())


def schedule_origin(start_at: float | None, lead_s: float = 0.05) -> float:
    """Time zero on the monotonic clock: `start_at` (Unix seconds), or `lead_s` from now."""
    return time.monotonic() + lead_s if start_at is None else monotonic_at(start_at)
