"""The dashboard's main panels as one PNG, drawn from the dashboard's own queries.

Grafana is not installed here: each panel's targets are run as range queries against
the Prometheus that scraped the run, and matplotlib draws them with the panel's title,
unit and legend format.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from burstguard.deploycheck.prometheus import PrometheusAPI

MAIN_PANELS = (
    "Burst index and arrivals",
    "Queue depth per class",
    "TTFT (gateway, per class)",
    "TTFT SLO attainment per class (5 m)",
    "429s and Retry-After",
    "Running and waiting per engine",
    "KV cache usage and preemptions per engine",
    "Tokens per second in and out",
)
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def dashboard(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    for d in docs:
        if d.get("kind") == "ConfigMap" and "burstguard.json" in (d.get("data") or {}):
            return dict(json.loads(d["data"]["burstguard.json"]))
    raise ValueError("no burstguard.json dashboard ConfigMap in the rendered overlay")


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: `{{class}}` becomes the series' `class` label."""
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt)


def render(
    api: PrometheusAPI, docs: Sequence[dict[str, Any]], start: float, end: float, out: Path,
    titles: Sequence[str] = MAIN_PANELS, step_s: float = 1.0,
) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {p["title"]: p for p in dashboard(docs)["panels"]}
    cols = 2
    rows = math.ceil(len(titles) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.0 * rows), sharex=True, squeeze=False)
    for ax, title in zip(axes.flat, titles, strict=False):
        panel = panels[title]
        for target in panel["targets"]:
            for series in api.query_range(target["expr"], start, end, step_s):
                t = [float(v[0]) - start for v in series["values"]]
                y = [float(v[1]) for v in series["values"]]
                label = legend(target["legendFormat"], series["metric"])
                ax.plot(t, y, label=label, linewidth=1.2)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel({"s": "seconds", "percentunit": "fraction"}.get(unit, ""), fontsize=8)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper right")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the run started")
    for ax in list(axes.flat)[len(titles) :]:
        ax.set_visible(False)
    fig.suptitle(
        "burstguard dashboard panels during a burst (queries of deploy/; drawn from a real "
        "Prometheus, not Grafana)",
        fontsize=11,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
