"""The live status line: rich on a TTY, a plain line every few seconds otherwise, and
almost nothing in CI (a line every 30 s) so logs stay readable."""

from __future__ import annotations

import os
import sys
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from burstguard.bench.runner import LiveCounts, Reporter


def _line(label: str, live: LiveCounts) -> str:
    p95 = live.ttft_p95()
    ttft = "-" if p95 is None else f"{p95 * 1000:.0f} ms"
    return (
        f"[{label}] {time.monotonic() - live.started_at:6.1f}s  sent {live.sent}  "
        f"in flight {live.in_flight}  done {live.done}  errors {live.errors}  "
        f"retries {live.retries}  p95 TTFT {ttft}"
    )


def make_reporter(label: str, quiet: bool = False) -> Reporter | None:
    """A reporter for run_bench, chosen for where stdout goes."""
    if quiet:
        return None
    if sys.stdout.isatty() and not os.environ.get("CI"):
        console = Console()
        holder: dict[str, Live] = {}

        def tty(live: LiveCounts, final: bool) -> None:
            if "live" not in holder:
                holder["live"] = Live(Text(""), console=console, refresh_per_second=4)
                holder["live"].start()
            holder["live"].update(Text(_line(label, live)))
            if final:
                holder["live"].stop()

        return tty
    every = 30.0 if os.environ.get("CI") else 5.0
    last = {"t": 0.0}

    def plain(live: LiveCounts, final: bool) -> None:
        now = time.monotonic()
        if final or now - last["t"] >= every:
            last["t"] = now
            print(_line(label, live), flush=True)

    return plain
