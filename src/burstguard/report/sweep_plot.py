"""A load sweep on one plot: throughput and TTFT p95 against the offered load, the knee
marked, so where throughput flattens can be read against where latency leaves the SLO
(`bench --sweep`'s sweep.json)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def sweep_figure(doc: dict[str, Any]) -> go.Figure:
    """Achieved (and offered) req/s on the left axis, TTFT p95 on the right; the SLO's
    TTFT bound dotted and the knee a vertical line."""
    points = doc["points"]
    x = [p["load"] for p in points]
    axis = f"{doc['axis']} ({doc['unit']})"
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[p["achieved_rps"] for p in points], name="achieved req/s",
                             mode="lines+markers", line={"color": "#1f77b4"}))  # fmt: skip
    if doc["axis"] == "rate":
        fig.add_trace(go.Scatter(x=x, y=[p["offered_rps"] for p in points],
                                 name="offered req/s (window)", mode="lines+markers",
                                 line={"color": "#999999", "dash": "dot"}))  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=[p["ttft_p95_s"] for p in points], name="TTFT p95 (s)",
                   mode="lines+markers", line={"color": "#d62728"}),
        secondary_y=True,
    )  # fmt: skip
    slo = (doc.get("slo") or {}).get("ttft_s")
    if slo is not None:
        fig.add_trace(
            go.Scatter(x=[min(x), max(x)], y=[slo, slo], name=f"TTFT SLO {slo:g} s",
                       mode="lines", line={"color": "#d62728", "dash": "dot", "width": 1}),
            secondary_y=True,
        )  # fmt: skip
    knee = doc.get("knee") or {}
    if knee.get("load") is not None:
        label = f"knee {knee['load']:g} {doc['unit']}" + ("" if knee.get("bounded") else "+")
        fig.add_vline(x=knee["load"], line={"color": "#2ca02c", "dash": "dash", "width": 2},
                      annotation_text=label, annotation_position="top left")  # fmt: skip
    fig.update_xaxes(title_text=axis)
    fig.update_yaxes(title_text="requests / s", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="TTFT p95 (s)", secondary_y=True, rangemode="tozero",
                     showgrid=False, tickmode="auto")  # fmt: skip
    fig.update_layout(title="Throughput and TTFT p95 vs offered load", height=440)
    return fig


SWEEP_HEADER = ("load", "offered req/s", "achieved req/s", "output tok/s", "TTFT p50 ms",
                "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms", "errors", "unfinished",
                "SLO attainment")  # fmt: skip


def sweep_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Each point's evidence, one row (SLO attainment last: it takes the pass/fail colour)."""
    return [
        [f"{p['load']:g}", f"{p['offered_rps']:.2f}", f"{p['achieved_rps']:.2f}",
         f"{p['output_tokens_per_s']:.0f}", _ms(p["ttft_p50_s"]), _ms(p["ttft_p95_s"]),
         _ms(p["tpot_p50_s"]), _ms(p["tpot_p95_s"]), str(p["errors"]), str(p["unfinished"]),
         _pct(p["slo_attainment"])]
        for p in doc["points"]
    ]  # fmt: skip
