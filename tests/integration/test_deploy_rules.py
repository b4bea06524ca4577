"""The PrometheusRule passes `promtool check rules`, and `promtool test rules` shows each
alert firing and clearing at the right times on synthetic bursts (deploy/tests/)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.integration.deploy_tools import DEPLOY, require

from burstguard.deploycheck import expressions, manifests

TEST_FILES = sorted((DEPLOY / "tests").glob("*.test.yaml"))


@pytest.fixture(scope="module")
def promtool() -> str:
    return require("promtool")


@pytest.fixture(scope="module")
def rules() -> dict:
    require("kubectl")
    return expressions.rules_file(manifests.render(DEPLOY / "overlays" / "single-engine"))


def run_unit_tests(
    promtool: str, rules: dict, where: Path, files: list[Path] = TEST_FILES
) -> subprocess.CompletedProcess[str]:
    (where / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    for test in files:
        shutil.copy(test, where / test.name)
    return subprocess.run(
        [promtool, "test", "rules", *(t.name for t in files)], cwd=where,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_promtool_check_rules(promtool: str, rules: dict, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = sum(len(g["rules"]) for g in rules["groups"])
    assert f"SUCCESS: {n} rules found" in proc.stdout


def test_alerts_fire_and_clear_on_synthetic_bursts(
    promtool: str, rules: dict, tmp_path: Path
) -> None:
    proc = run_unit_tests(promtool, rules, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = [c for f in TEST_FILES for c in yaml.safe_load(f.read_text())["tests"]]
    tested = {t["alertname"] for c in cases for t in c.get("alert_rule_test", ())}
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    untested = {"BurstguardTTFTBudgetBurnSlow", "BurstguardEngineScrapeDown",
                "BurstguardBackendMetricsStale"}  # fmt: skip
    assert alerts - tested == untested


@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        ("BurstguardBurstDetected", "burst_index:max > 5", "burst_index:max > 9"),
        ("BurstguardTTFTBudgetBurnFast", "(14.4 * 0.05)", "(19 * 0.05)"),
        ("BurstguardKVCacheNearFull", "and on (pod)", "or on (pod)"),
    ],
)  # fmt: skip
def test_unit_tests_catch_a_changed_alert(
    promtool: str, rules: dict, tmp_path: Path, alert: str, old: str, new: str
) -> None:
    """The unit tests bite: a changed threshold or operator makes them fail."""
    broken = yaml.safe_load(yaml.safe_dump(rules))
    rule = next(r for g in broken["groups"] for r in g["rules"] if r.get("alert") == alert)
    assert old in rule["expr"]
    rule["expr"] = rule["expr"].replace(old, new)
    files = [f for f in TEST_FILES if f"alertname: {alert}" in f.read_text()]
    proc = run_unit_tests(promtool, broken, tmp_path, files)
    assert proc.returncode != 0 and f"alertname: {alert}" in proc.stdout + proc.stderr
