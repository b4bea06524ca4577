"""examples/ci/: the burst-gate script a CI job runs, end to end on the emulator (short
legs), first as a release without a baseline, then as the next one gated against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

CI = REPO_ROOT / "examples" / "ci"


def gate(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CI / "burst-gate.sh")], capture_output=True, text=True, timeout=300,
        env={**os.environ, "BURSTGUARD": f"{sys.executable} -m burstguard.cli", "OUT": str(out),
             "DURATION": "20", "SPEEDUP": "10", "CI": "true", **env},
    )  # fmt: skip


def test_the_workflow_runs_the_script() -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    steps = workflow["jobs"]["burst-gate"]["steps"]
    assert any("examples/ci/burst-gate.sh" in s.get("run", "") for s in steps)
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)


def test_burst_gate_script_gates_diagnoses_and_compares_to_a_baseline(tmp_path: Path) -> None:
    first = gate(tmp_path / "v1")
    # the default emulator under the seed's bursts fails the seed's rules: the gate trips
    assert first.returncode == 1, first.stdout + first.stderr
    for name in ("report.html", "verdict.json", "diagnosis.json", "diagnosis.txt"):
        assert (tmp_path / "v1" / name).stat().st_size > 0, name
    verdict = json.loads((tmp_path / "v1" / "verdict.json").read_text())
    assert verdict["passed"] is False and verdict["valid"] is True
    # the script passes no --scrape-metrics: the scenario scraped the emulator's /metrics
    drain = next(c for c in verdict["checks"] if c["name"] == "queue_drain")
    assert drain["status"] != "n/a", drain
    diagnosis = json.loads((tmp_path / "v1" / "diagnosis.json").read_text())
    assert [d["run"].rsplit("/", 1)[-1] for d in diagnosis] == ["steady", "burst"]
    # the next release: same engine, gated against v1 (wide tolerance: live timing noise)
    second = gate(tmp_path / "v2", BASELINE=str(tmp_path / "v1" / "run"), TOLERANCE="1.0",
                  GATE_ARGS="--max-ttft-p95-ratio 1000 --serious-ttft-p95-ratio 1000 "
                  "--max-tpot-p95-ratio 1000 --max-itl-p95-ratio 1000 "
                  "--max-itl-jitter-ratio 1000 --min-slo 0")  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert "baseline exit 0" in second.stdout
    assert (tmp_path / "v2" / "baseline.html").is_file()
