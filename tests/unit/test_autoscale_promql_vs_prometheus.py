"""The KEDA model's queries agree with Prometheus' own engine on the same samples.

`promtool test rules` evaluates the exact PromQL text the exported ScaledObject carries
over per-class input series (as the gateway exports them, one series per class); the
model evaluates its own `Query` over the scraped totals. Each expected value is set to an
impossible -1 so promtool prints what it got, and the two are compared here.

The model follows Prometheus 3 (range selectors are left-open: (t - w, t]); Prometheus 2
includes a sample at exactly t - w, so against a 2.x promtool the model's window is
widened by a microsecond to include it.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from burstguard.core.scaling.promql import Query, ScrapedSeries

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")

STEP = 15
CLASSES = ("interactive", "standard", "batch")
QUERIES = [
    Query("llm_request_queue_depth"),
    Query("llm_request_queue_depth", "max_over_time", 60),
    Query("llm_request_queue_depth", "avg_over_time", 120),
    Query("llm_request_queue_depth", "deriv", 120),
    Query("burstguard_arrivals_total", "rate", 60),
    Query("burstguard_arrivals_total", "rate", 120),
    Query("llm_request_total", "rate", 300),
    Query("fresh_total", "rate", 60, kind="counter"),  # one series from 0: to-zero clamp
]
EVAL_AT = (180, 187, 210, 255, 300, 420, 470)  # 470: after the last sample (435)


def series(rng: random.Random, n: int) -> dict[str, dict[str, list[float]]]:
    """Per metric, per class: n samples, STEP seconds apart (counters only grow)."""
    out: dict[str, dict[str, list[float]]] = {}
    for metric in ("llm_request_queue_depth", "burstguard_arrivals_total", "llm_request_total"):
        out[metric] = {}
        for cls in CLASSES:
            if metric == "llm_request_queue_depth":
                out[metric][cls] = [float(rng.randint(0, 60)) for _ in range(n)]
            else:
                total, values = 1000.0 * (1 + CLASSES.index(cls)), []
                for _ in range(n):
                    total += rng.randint(0, 300)
                    values.append(total)
                out[metric][cls] = values
    out["fresh_total"] = {"interactive": [0.0] * 12 + [40.0 * k for k in range(1, n - 11)]}
    return out


def promtool_major() -> int:
    out = subprocess.run(["promtool", "--version"], capture_output=True, text=True, timeout=30)
    match = re.search(r"version (\d+)\.", out.stdout + out.stderr)
    assert match, out.stdout + out.stderr
    return int(match.group(1))


def test_model_queries_match_prometheus(tmp_path: Path) -> None:
    widen = 1e-6 if promtool_major() < 3 else 0.0
    n = 30
    data = series(random.Random(7), n)
    tests = []
    expected: list[tuple[str, int, float]] = []
    for q in QUERIES:
        scraped = ScrapedSeries(STEP)
        for i in range(n):
            scraped.offer(i * STEP, sum(v[i] for v in data[q.metric].values()))
        for t in EVAL_AT:
            expr = q.promql(STEP)
            model = replace(q, window_s=q.window_s + widen) if q.function != "last" else q
            expected.append((expr, t, model.evaluate(scraped, float(t))))
            tests.append(
                {"expr": expr, "eval_time": f"{t}s", "exp_samples": [{"labels": "{}", "value": -1}]}
            )
    input_series = [
        {"series": f'{m}{{class="{c}"}}', "values": " ".join(f"{v:g}" for v in vals)}
        for m, by_class in data.items()
        for c, vals in by_class.items()
    ]
    spec = {
        "evaluation_interval": f"{STEP}s",
        "tests": [
            {"interval": f"{STEP}s", "input_series": input_series, "promql_expr_test": tests}
        ],
    }
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    text = out.stdout + out.stderr
    got = re.findall(r'expr: "(.*?)", time: (\S+),\s+exp: .*?\n\s+got: \{\} (\S+)', text)
    assert len(got) == len(expected), text[-2000:]
    for (expr, t, model), (p_expr, _, p_value) in zip(expected, got, strict=True):
        assert p_expr.replace('\\"', '"') == expr
        assert model == pytest.approx(float(p_value), rel=1e-6, abs=1e-9), f"{expr} at {t}s"
