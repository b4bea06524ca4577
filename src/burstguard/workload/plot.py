"""Plots of a workload: requests per second over time and the inter-arrival distribution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from burstguard.workload.metrics import per_second_series
from burstguard.workload.spec import Workload


def plot_workload(workload: Workload, result: dict[str, Any], path: Path) -> None:
    """PNG via matplotlib (no browser needed), HTML via plotly with plotly.js inlined."""
    path.parent.mkdir(parents=True, exist_ok=True)
    series = per_second_series(workload)
    gaps = np.diff(workload.arrival_s)
    gaps = gaps[gaps > 0]
    name = workload.source or path.stem
    title = f"{name}: {result['requests']} requests, verdict {result['verdict']}"
    if path.suffix.lower() == ".png":
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7))
        ax1.plot(series["t"], series["requests"], lw=0.7)
        ax1.set_xlabel("time (s)")
        ax1.set_ylabel("requests / s")
        ax1.set_title(title)
        if gaps.size:
            bins = np.logspace(np.log10(gaps.min()), np.log10(gaps.max()), 60)
            ax2.hist(gaps, bins=bins)
            ax2.set_xscale("log")
        ax2.set_xlabel("inter-arrival time (s, log)")
        ax2.set_ylabel("count")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2, cols=1, subplot_titles=("requests per second", "inter-arrival time (s)")
    )
    fig.add_trace(go.Scatter(x=series["t"], y=series["requests"], mode="lines", name="req/s"), 1, 1)
    fig.add_trace(go.Histogram(x=np.log10(gaps), nbinsx=60, name="log10 gap"), 2, 1)
    fig.update_xaxes(title_text="log10 inter-arrival (s)", row=2, col=1)
    fig.update_layout(title=title, height=700, showlegend=False)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
