"""The verdict as a rich table on the terminal (compare, the steady-vs-burst scenario, the demo)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from burstguard.report.compare import Check, Verdict

STATUS_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "serious": "bold white on red",
    "n/a": "dim",
    "info": "cyan",
}

_MILLISECONDS = (
    "ttft_p95_ratio", "tpot_p95_ratio", "itl_p95_ratio", "ttft_p95_regression",
    "tpot_p95_regression", "itl_p95_regression", "e2e_p95_regression",
)  # fmt: skip
_PERCENT = ("kv_peak", "slo_regression")


def _fmt_leg(check: Check, value: float | None) -> str:
    if value is None:
        return "-"
    if check.name in _MILLISECONDS:
        return f"{value * 1000:.1f} ms"
    if check.name.startswith("slo_") or check.name in _PERCENT:
        return f"{value:.1%}"
    if check.name == "rate_ratio":
        return f"{value:.2f} req/s"
    if check.name == "queue_drain":
        return f"{value:.0f} waiting"
    if check.name == "drain_regression":
        return f"{value:.1f} s"
    if check.name in ("itl_jitter_ratio", "retry_amplification", "throughput_regression"):
        return f"{value:.2f}"
    return f"{value:g}"


def fmt_value(check: Check) -> str:
    """The figure a limit applies to, in the unit a reader expects."""
    if check.value is None:
        return "-"
    if check.name.endswith("_ratio") or check.name == "retry_amplification":
        return f"{check.value:.2f}x"
    if check.name.endswith("_regression"):
        return _fmt_leg(check, check.value)
    if check.name.startswith("slo_") or check.name == "kv_peak":
        return f"{check.value:.1%}"
    if check.name == "queue_drain":
        return f"{check.value:.1f} s"
    return f"{check.value:g}"


def fmt_leg(check: Check, leg: str) -> str:
    return _fmt_leg(check, check.steady if leg == "steady" else check.burst)


def verdict_table(verdict: Verdict, title: str = "steady vs burst") -> Table:
    legs = verdict.legs
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("check")
    table.add_column(legs.get("steady", "steady"), justify="right")
    table.add_column(legs.get("burst", "burst"), justify="right")
    table.add_column("value", justify="right")
    table.add_column("limit", justify="right")
    table.add_column("status")
    table.add_column("note", overflow="fold")
    for c in verdict.checks:
        table.add_row(
            c.label,
            fmt_leg(c, "steady"),
            fmt_leg(c, "burst"),
            fmt_value(c),
            c.limit,
            f"[{STATUS_STYLE[c.status]}]{c.status.upper()}[/]",
            c.note,
        )
    outcome = "[bold green]PASS[/]" if verdict.passed else "[bold red]FAIL[/]"
    if verdict.serious:
        outcome = "[bold white on red]FAIL (serious)[/]"
    if not verdict.valid:
        outcome = "[bold red]INVALID[/]: " + "; ".join(verdict.invalid)
    table.caption = f"verdict: {outcome}"
    table.caption_justify = "left"
    return table


def print_verdict(verdict: Verdict, console: Console | None = None, title: str = "") -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that notes do not wrap
            console = Console(width=120)
    console.print(verdict_table(verdict, title or "steady vs burst"))
