"""How busy this machine's CPUs are, from /proc/stat (Linux): calibrate's quiet check
(calibrate/check.py) when the engine runs on this host."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_times(text: str) -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat's `cpu` line; idle and iowait
    count as not busy."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            total = sum(values[:8])  # guest time is already inside user/nice
            return total - idle, total
    return None


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all CPUs' time spent busy between two `cpu_times` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def measure_busy(window_s: float = 2.0) -> float | None:
    """The machine's busy share over `window_s`; None where /proc/stat is not readable."""
    try:
        before = cpu_times(PROC_STAT.read_text())
        time.sleep(window_s)
        after = cpu_times(PROC_STAT.read_text())
    except OSError:
        return None
    return busy_fraction(before, after) if before and after else None


def wait_until_quiet(
    bound: float, max_wait_s: float, say: Callable[[str], None], window_s: float = 2.0
) -> float | None:
    """Samples the machine until its busy share is at most `bound` or `max_wait_s` has
    passed; returns the last share (None where it cannot be measured)."""
    deadline = time.monotonic() + max_wait_s
    busy = measure_busy(window_s)
    while busy is not None and busy > bound and time.monotonic() < deadline:
        say(f"machine busy ({busy:.0%} of its CPUs with the engine idle): waiting for quiet")
        busy = measure_busy(window_s)
    return busy
