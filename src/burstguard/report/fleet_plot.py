"""The autoscaled fleet on one time axis: arrivals, replicas desired vs ready, the
gateway's queue, and TTFT, stacked so a scale-up can be read against the burst that
caused it and the latency it did (or did not) save. Drawn for a summary that has a
`replicas` series (`burstguard sim --autoscaler`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from burstguard.wire.records import RequestRecord

Leg = tuple[str, dict[str, Any], Sequence[RequestRecord]]
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def fleet_figure(legs: Sequence[Leg]) -> go.Figure | None:
    """None when no leg ran an autoscaler."""
    scaled = [(n, s) for n, s, _ in legs if s.get("replicas")]
    if not scaled:
        return None
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05,
        subplot_titles=["arrivals / s", "replicas: desired vs ready", "gateway queue depth",
                        "TTFT p95 per second (s)"],
    )  # fmt: skip
    for k, (name, s) in enumerate(scaled):
        color = _COLORS[k % len(_COLORS)]
        series, reps = s.get("series") or {}, s["replicas"]
        end = max([*series.get("t", [0.0]), *reps["t"]])
        step = {"shape": "hv", "color": color}
        fig.add_trace(go.Scatter(x=series.get("t", []), y=series.get("offered", []),
                                 name=f"{name}: arrivals", line=step), row=1, col=1)  # fmt: skip
        for key, dash in (("desired", "dot"), ("ready", "solid")):
            fig.add_trace(
                go.Scatter(x=[*reps["t"], end], y=[*reps[key], reps[key][-1]],
                           name=f"{name}: {key}", line={**step, "dash": dash}),
                row=2, col=1,
            )  # fmt: skip
        queue = s.get("queue_depth") or {}
        fig.add_trace(go.Scatter(x=queue.get("t", []), y=queue.get("value", []),
                                 name=f"{name}: queue", line=step), row=3, col=1)  # fmt: skip
        fig.add_trace(
            go.Scatter(x=series.get("t", []), y=series.get("ttft_p95", []),
                       name=f"{name}: TTFT p95", mode="lines", line={"color": color}),
            row=4, col=1,
        )  # fmt: skip
    fig.update_xaxes(title_text="time (s)", row=4, col=1)
    fig.update_layout(title="Autoscaled fleet", height=900)
    return fig
