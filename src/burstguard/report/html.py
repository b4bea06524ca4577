"""Self-contained HTML reports of bench (or sim) runs, one leg or several side by side.

One file that opens offline: plotly.js is inlined once, every figure is a plotly div, and
the tables are plain HTML. Plots: offered vs completed requests per second, TTFT over time
(points plus a rolling p95), engine queue depth and KV usage when the run scraped them,
the autoscaled fleet (arrivals, replicas desired vs ready, gateway queue, TTFT on one time
axis) for a sim run with an autoscaler,
TTFT and E2E CDFs; tables: the verdict (for a compare), the summary and per-class figures.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from burstguard.report.compare import KV_METRICS, QUEUE_METRICS, Verdict, server_column
from burstguard.report.fleet_plot import fleet_figure
from burstguard.report.table import fmt_leg, fmt_value
from burstguard.wire.records import RequestRecord

Leg = tuple[str, dict[str, Any], Sequence[RequestRecord]]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
MAX_POINTS = 6000  # scatter points per leg; more are thinned evenly (the p95 line uses all)
ROLLING_WINDOW_S = 5.0

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f3f3f3; }
.pass { color: #116611; font-weight: bold; } .fail { color: #b00; font-weight: bold; }
.serious { background: #b00; color: #fff; font-weight: bold; }
.info { color: #066; } .na { color: #888; }
.verdict { font-size: 1.1rem; margin: .5rem 0; }
.meta { color: #666; font-size: .85rem; }
"""


def _stat(summary: dict[str, Any], key: str, stat: str) -> float | None:
    block = summary.get(key)
    value = block.get(stat) if isinstance(block, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(value) if isinstance(value, int | float) else "-"


def _pct(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


SUMMARY_ROWS: list[tuple[str, Any]] = [
    ("requests", lambda s: _num(s.get("requests"), "{:d}")),
    ("completed", lambda s: _num(s.get("completed"), "{:d}")),
    ("errors", lambda s: _num(s.get("errors"), "{:d}")),
    ("duration (s)", lambda s: _num(s.get("duration_s"), "{:.1f}")),
    ("offered rate (req/s)", lambda s: _num(s.get("offered_rate_rps"))),
    ("achieved rate (req/s)", lambda s: _num(s.get("achieved_rate_rps"))),
    ("output tokens/s", lambda s: _num(s.get("output_tokens_per_s"), "{:.0f}")),
    ("TTFT p50 (ms)", lambda s: _ms(_stat(s, "ttft_s", "p50"))),
    ("TTFT p95 (ms)", lambda s: _ms(_stat(s, "ttft_s", "p95"))),
    ("TTFT p99 (ms)", lambda s: _ms(_stat(s, "ttft_s", "p99"))),
    ("TPOT p50 (ms)", lambda s: _ms(_stat(s, "tpot_s", "p50"))),
    ("TPOT p95 (ms)", lambda s: _ms(_stat(s, "tpot_s", "p95"))),
    ("ITL p95 (ms)", lambda s: _ms(_stat(s, "itl_s", "p95"))),
    ("E2E p50 (ms)", lambda s: _ms(_stat(s, "e2e_s", "p50"))),
    ("E2E p95 (ms)", lambda s: _ms(_stat(s, "e2e_s", "p95"))),
    ("schedule lag p99 (ms)", lambda s: _ms(_stat(s, "schedule_lag_s", "p99"))),
    ("SLO attainment", lambda s: _pct(s.get("slo_attainment"))),
    ("goodput (req/s)", lambda s: _num(s.get("goodput_rps"))),
    ("retries", lambda s: _num(s.get("retries"), "{:d}")),
]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        css = cls[i] if i < len(cls) else ""
        cells = "".join(f"<td>{html.escape(c)}</td>" for c in row[:-1])
        last = (
            f'<td class="{css}">{html.escape(row[-1])}</td>'
            if css
            else (f"<td>{html.escape(row[-1])}</td>")
        )
        body.append(f"<tr>{cells}{last}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _summary_table(legs: Sequence[Leg]) -> str:
    rows = [[name, *(fmt(s) for _, s, _ in legs)] for name, fmt in SUMMARY_ROWS]
    slo = legs[0][1].get("slo") or {}
    note = ""
    if slo:
        note = (
            f'<p class="meta">SLO: TTFT &le; {slo.get("ttft_s", 0) * 1000:.0f} ms and '
            f"TPOT &le; {slo.get('tpot_s', 0) * 1000:.0f} ms.</p>"
        )
    return _table(["", *(name for name, _, _ in legs)], rows) + note


def _class_table(legs: Sequence[Leg]) -> str:
    classes = sorted({c for _, s, _ in legs for c in (s.get("by_class") or {})})
    if not classes:
        return ""
    header = ["class", "metric", *(name for name, _, _ in legs)]
    rows = []
    for cls in classes:
        blocks = [(s.get("by_class") or {}).get(cls, {}) for _, s, _ in legs]
        rows.append([cls, "completed", *(_num(b.get("completed"), "{:d}") for b in blocks)])
        rows.append([cls, "TTFT p95 (ms)", *(_ms(_stat(b, "ttft_s", "p95")) for b in blocks)])
        rows.append([cls, "E2E p95 (ms)", *(_ms(_stat(b, "e2e_s", "p95")) for b in blocks)])
        rows.append([cls, "SLO attainment", *(_pct(b.get("slo_attainment")) for b in blocks)])
    return "<h2>By priority class</h2>" + _table(header, rows)


def _verdict_html(verdict: Verdict) -> str:
    legs = verdict.legs
    rows, cls = [], []
    for c in verdict.checks:
        rows.append(
            [
                c.label,
                fmt_leg(c, "steady"),
                fmt_leg(c, "burst"),
                fmt_value(c),
                c.limit,
                c.note,
                c.status.upper(),
            ]
        )
        cls.append("na" if c.status == "n/a" else c.status)
    header = [
        "check",
        legs.get("steady", "steady"),
        legs.get("burst", "burst"),
        "value",
        "limit",
        "note",
        "status",
    ]
    outcome = "PASS" if verdict.passed else ("FAIL (serious)" if verdict.serious else "FAIL")
    css = "pass" if verdict.passed else ("serious" if verdict.serious else "fail")
    return (
        f'<h2>Verdict</h2><p class="verdict">verdict: <span class="{css}">{outcome}</span></p>'
        + _table(header, rows, cls)
    )


def _cdf(values: np.ndarray, points: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """A CDF on at most `points` quantiles, so large runs stay light in the browser."""
    q = np.linspace(0, 1, min(points, values.size))
    return np.quantile(values, q), q


def rolling_p95(t: np.ndarray, v: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """p95 of `v` over a trailing `window_s` window, on a grid every window/10 seconds."""
    order = np.argsort(t)
    t, v = t[order], v[order]
    if t.size == 0:
        return t, v
    step = window_s / 10
    grid = np.arange(t[0] + step, t[-1] + step, step)
    lo = np.searchsorted(t, grid - window_s, side="right")
    hi = np.searchsorted(t, grid, side="right")
    keep = hi > lo
    p95 = [float(np.percentile(v[a:b], 95)) for a, b in zip(lo[keep], hi[keep], strict=True)]
    return grid[keep], np.asarray(p95)


def _ttft_points(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [
        (r.sent_s, r.ttft_s)
        for r in records
        if r.ok and r.sent_s is not None and r.ttft_s is not None
    ]
    arr = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def _grid(legs: Sequence[Leg], rows: int, titles: Sequence[str]) -> go.Figure:
    return make_subplots(
        rows=rows,
        cols=len(legs),
        shared_yaxes="rows",
        shared_xaxes=True,
        subplot_titles=list(titles),
        horizontal_spacing=0.05,
        vertical_spacing=0.12,
    )


def _rate_figure(legs: Sequence[Leg]) -> go.Figure:
    fig = _grid(legs, 1, [name for name, _, _ in legs])
    for col, (name, summary, _) in enumerate(legs, 1):
        series = summary.get("series") or {}
        t = series.get("t", [])
        for key, label, color, dash in (
            ("offered", "offered", "#999999", "dot"),
            ("completed", "completed", COLORS[(col - 1) % len(COLORS)], "solid"),
            ("errors", "errors", "#000000", "dash"),
        ):
            if key in series:
                fig.add_trace(
                    go.Scatter(
                        x=t,
                        y=series[key],
                        name=f"{name}: {label}",
                        mode="lines",
                        line={"color": color, "dash": dash, "shape": "hv"},
                    ),
                    row=1,
                    col=col,
                )
    fig.update_yaxes(title_text="requests / s", row=1, col=1)
    fig.update_xaxes(title_text="time (s)")
    fig.update_layout(title="Offered vs completed requests per second", height=380)
    return fig


def _ttft_figure(legs: Sequence[Leg]) -> go.Figure:
    fig = _grid(legs, 1, [name for name, _, _ in legs])
    for col, (name, summary, records) in enumerate(legs, 1):
        color = COLORS[(col - 1) % len(COLORS)]
        t, v = _ttft_points(records)
        if t.size:
            stride = max(1, t.size // MAX_POINTS)
            label = f"{name}: TTFT" + (f" (every {stride}th)" if stride > 1 else "")
            fig.add_trace(
                go.Scatter(
                    x=t[::stride],
                    y=v[::stride],
                    name=label,
                    mode="markers",
                    marker={"color": color, "size": 4, "opacity": 0.35},
                ),
                row=1,
                col=col,
            )
            gt, gp = rolling_p95(t, v, ROLLING_WINDOW_S)
            fig.add_trace(
                go.Scatter(
                    x=gt,
                    y=gp,
                    name=f"{name}: rolling p95 ({ROLLING_WINDOW_S:g} s)",
                    mode="lines",
                    line={"color": "#000000", "width": 2},
                ),
                row=1,
                col=col,
            )
        else:  # no records: the summary's per-second p95 is all there is
            series = summary.get("series") or {}
            fig.add_trace(
                go.Scatter(
                    x=series.get("t", []),
                    y=series.get("ttft_p95", []),
                    name=f"{name}: p95 per second",
                    mode="lines+markers",
                    line={"color": color},
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(title_text="TTFT (s)", row=1, col=1)
    fig.update_xaxes(title_text="send time (s)")
    fig.update_layout(title="Time to first token over time", height=420)
    return fig


def _server_figure(legs: Sequence[Leg]) -> go.Figure | None:
    columns = [
        (
            server_column(s, QUEUE_METRICS),
            server_column(s, KV_METRICS),
            server_column(s, ("vllm:num_requests_running",)),
        )
        for _, s, _ in legs
    ]
    if all(q is None and kv is None for q, kv, _ in columns):
        return None
    fig = _grid(
        legs, 2, [*(f"{n}: queue" for n, _, _ in legs), *(f"{n}: KV cache" for n, _, _ in legs)]
    )
    for col, ((name, summary, _), (queue, kv, running)) in enumerate(
        zip(legs, columns, strict=True), 1
    ):
        t = (summary.get("server_series") or {}).get("t", [])
        color = COLORS[(col - 1) % len(COLORS)]
        if queue is not None:
            fig.add_trace(
                go.Scatter(
                    x=t, y=queue, name=f"{name}: waiting", mode="lines", line={"color": color}
                ),
                row=1,
                col=col,
            )
        if running is not None:
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=running,
                    name=f"{name}: running",
                    mode="lines",
                    line={"color": color, "dash": "dot"},
                ),
                row=1,
                col=col,
            )
        if kv is not None:
            fig.add_trace(
                go.Scatter(
                    x=t, y=kv * 100, name=f"{name}: KV usage %", mode="lines", line={"color": color}
                ),
                row=2,
                col=col,
            )
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_yaxes(title_text="KV cache used (%)", row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2)
    fig.update_layout(title="Engine queue depth and KV cache usage (scraped /metrics)", height=560)
    return fig


def _cdf_figure(legs: Sequence[Leg]) -> go.Figure | None:
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["TTFT", "E2E latency"], horizontal_spacing=0.08
    )
    drawn = False
    for i, (name, _, records) in enumerate(legs):
        color = COLORS[i % len(COLORS)]
        ok = [r for r in records if r.ok]
        for col, values in (
            (1, [r.ttft_s for r in ok if r.ttft_s is not None]),
            (2, [r.e2e_s for r in ok if r.e2e_s is not None]),
        ):
            if not values:
                continue
            x, y = _cdf(np.asarray(values, dtype=np.float64))
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=name,
                    mode="lines",
                    line={"color": color},
                    legendgroup=name,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
            drawn = True
    if not drawn:
        return None
    fig.update_xaxes(title_text="seconds", type="log")
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1], row=1, col=1)
    fig.update_layout(title="Latency distributions (CDF, log scale)", height=420)
    return fig


def _fig_html(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(template="plotly_white", margin={"t": 80, "l": 60, "r": 20, "b": 50})
    return pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )


def render(
    legs: Sequence[Leg], title: str, verdict: Verdict | None = None, notes: Sequence[str] = ()
) -> str:
    """The report page as one HTML string."""
    if not legs:
        raise ValueError("a report needs at least one run")
    figures = [
        ("rate", _rate_figure(legs)),
        ("ttft", _ttft_figure(legs)),
        ("server", _server_figure(legs)),
        ("fleet", fleet_figure(legs)),
        ("cdf", _cdf_figure(legs)),
    ]
    plots = "\n".join(_fig_html(fig, f"plot-{name}") for name, fig in figures if fig is not None)
    sources = ", ".join(sorted({str(s.get("source", "?")) for _, s, _ in legs}))
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    extra = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">burstguard report · {made} · source: {html.escape(sources)}</p>',
        extra,
        _verdict_html(verdict) if verdict is not None else "",
        "<h2>Summary</h2>",
        _summary_table(legs),
        _class_table(legs),
        "<h2>Plots</h2>",
        plots,
        "</body></html>",
    ]
    return "\n".join(parts)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_run_report(
    summary: dict[str, Any],
    records: Sequence[RequestRecord],
    path: Path,
    title: str = "burstguard run",
) -> None:
    """One run's report (bench `--report`, `burstguard report RUN_DIR`)."""
    _write(path, render([("run", summary, records)], title))


def write_compare_report(
    legs: Sequence[Leg],
    verdict: Verdict | None,
    path: Path,
    title: str = "burstguard: steady vs burst",
    notes: Sequence[str] = (),
) -> None:
    """Several runs side by side (compare `--report`, the scenario, the demo)."""
    _write(path, render(legs, title, verdict, notes))


def render_sweep(doc: dict[str, Any], title: str) -> str:
    """A sweep's page: the knee and why, each point's figures, the one sweep plot."""
    from burstguard.report.sweep_plot import SWEEP_HEADER, sweep_figure, sweep_rows

    knee, unit = doc.get("knee") or {}, doc.get("unit", "")
    if knee.get("load") is None:
        head = f"No knee: {knee.get('reason', '')}"
    else:
        bound = "" if knee.get("bounded") else " (at least)"
        head = f"Knee: {knee['load']:g} {unit}{bound} ({knee.get('reason', '')})"
    win, stop, slo = doc.get("window") or {}, doc.get("stop") or {}, doc.get("slo") or {}
    rule = doc.get("stopped") or "every load ran"
    meta = (
        f"Each load: {win.get('duration_s', 0):g} s, figures over "
        f"[{win.get('warmup_s', 0):g}, {win.get('duration_s', 0) - win.get('cooldown_s', 0):g})"
        f" s. SLO: TTFT &le; {slo.get('ttft_s', 0) * 1000:.0f} ms and TPOT &le; "
        f"{slo.get('tpot_s', 0) * 1000:.0f} ms; stop below "
        f"{stop.get('min_slo_attainment', 0):.0%} attainment or above "
        f"{stop.get('max_error_rate', 0):.0%} errors (stopped: {html.escape(str(rule))})."
    )
    passed = {i for i, p in enumerate(doc["points"])
              if p["slo_attainment"] is not None
              and p["slo_attainment"] >= stop.get("min_slo_attainment", 0)}  # fmt: skip
    css = ["pass" if i in passed else "fail" for i in range(len(doc["points"]))]
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">burstguard sweep · {made} · target: '
        f"{html.escape(str(doc.get('target', '?')))}</p>",
        f'<p class="verdict">{html.escape(head)}</p>',
        "<h2>Points</h2>",
        _table([f"{doc.get('axis', 'load')} ({unit})", *SWEEP_HEADER[1:]], sweep_rows(doc), css),
        f'<p class="meta">{meta}</p>',
        "<h2>Plot</h2>",
        _fig_html(sweep_figure(doc), "plot-sweep"),
        "</body></html>",
    ]
    return "\n".join(parts)


def write_sweep_report(doc: dict[str, Any], path: Path, title: str = "burstguard sweep") -> None:
    """A sweep's report (bench --sweep --report, `burstguard report SWEEP_DIR`)."""
    _write(path, render_sweep(doc, title))
