"""compare as a release gate on simulated runs: preemption limits, the --baseline regression
gate against a slower engine, and sim runs that carry the engine series compare reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import BURSTGUARD

LONG = ["--prompt-tokens", "4000", "--output-tokens", "256", "--duration", "60"]
# everything but the check under test opened wide, so the verdict turns on that check alone
WIDE = ["--max-ttft-p95-ratio", "1000", "--serious-ttft-p95-ratio", "1000",
        "--max-tpot-p95-ratio", "1000", "--max-itl-p95-ratio", "1000",
        "--max-itl-jitter-ratio", "1000", "--min-slo", "0"]  # fmt: skip


def sim(out: Path, *args: str) -> Path:
    path = out.with_suffix(".json")
    proc = subprocess.run([*BURSTGUARD, "sim", *args, "--json", str(path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return path


def compare(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([*BURSTGUARD, "compare", *args, "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def check(verdict: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in verdict["checks"] if c["name"] == name)


def test_compare_fails_preemptions_over_the_limit_and_passes_without(tmp_path: Path) -> None:
    steady = sim(tmp_path / "steady", "--pattern", "poisson", "--rate", "1", *LONG)
    roomy = sim(tmp_path / "roomy", "--pattern", "burst", *LONG)
    tight = sim(tmp_path / "tight", "--pattern", "burst", "--gpu-memory-utilization", "0.25",
                *LONG)  # fmt: skip
    code, verdict = compare(str(steady), str(roomy), *WIDE, "--max-preemptions", "0")
    assert code == 0, verdict
    assert check(verdict, "preemptions")["burst"] == 0
    # sim runs now carry the engine series: the drain and KV checks are measured, not N/A
    assert check(verdict, "queue_drain")["status"] == "pass"
    assert check(verdict, "kv_peak")["burst"] > 0
    code, verdict = compare(str(steady), str(tight), *WIDE, "--max-preemptions", "0")
    assert code == 1
    assert check(verdict, "preemptions")["status"] == "fail"
    assert check(verdict, "preemptions")["burst"] > 0
    assert [c["name"] for c in verdict["checks"] if c["status"] == "fail"] == ["preemptions"]


def test_baseline_gate_fails_a_slower_engine_and_passes_the_same_one(tmp_path: Path) -> None:
    burst = ["--pattern", "burst", "--duration", "120", "--seed", "3",
             "--prompt-tokens", "1024", "--output-tokens", "256"]  # fmt: skip
    old = sim(tmp_path / "old", "--profile", "llama3-8b-h100", *burst)
    same = sim(tmp_path / "same", "--profile", "llama3-8b-h100", *burst)
    slower = sim(tmp_path / "slower", "--profile", "llama3-8b-a100", *burst)
    code, verdict = compare("--baseline", str(old), str(same))
    assert code == 0, verdict
    code, verdict = compare("--baseline", str(old), str(slower))
    assert code == 1
    ttft = check(verdict, "ttft_p95_regression")
    assert ttft["status"] == "fail" and ttft["burst"] > 1.1 * ttft["steady"]


def test_sim_scenario_runs_the_seeds_two_legs_in_virtual_time(tmp_path: Path) -> None:
    # On A100: its bursts queue for 1.5 s after their worst peak. The kernel-fitted H100
    # profile prefills them fast enough that the queue empties within 0.5 s (no lasting queue).
    out = tmp_path / "svb"
    proc = subprocess.run(
        [*BURSTGUARD, "sim", "--scenario", "steady-vs-burst", "--out", str(out),
         "--duration", "120", "--prompt-tokens", "1024", "--output-tokens", "256",
         "--profile", "llama3-8b-a100"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the seed's bursts fail the gate
    steady = json.loads((out / "steady" / "summary.json").read_text())
    burst = json.loads((out / "burst" / "summary.json").read_text())
    assert steady["mode"] == "closed" and steady["concurrency"] == 32
    assert 0.8 < burst["offered_rate_rps"] / steady["offered_rate_rps"] < 1.25
    verdict = json.loads((out / "verdict.json").read_text())
    assert check(verdict, "ttft_p95_ratio")["status"] in ("fail", "serious")
    assert check(verdict, "queue_drain")["status"] != "n/a"  # the sim records the queue
    diag = subprocess.run([*BURSTGUARD, "diagnose", str(out), "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    legs = json.loads(diag.stdout)
    assert [leg["first_cause"] for leg in legs] == [None, "batch_building"]


def test_sim_load_flags_refuse_bad_combinations() -> None:
    for args, words in (
        (["--burst-cycle", "--rate", "3"], "--rate does not apply"),
        (["--concurrency", "3", "--pattern", "burst"], "exactly one of"),
        (["--scenario", "steady-vs-burst"], "needs --out"),
        (["--concurrency", "4", "--gateway", "examples/gateway.yaml"], "open-loop loads only"),
    ):
        proc = subprocess.run([*BURSTGUARD, "sim", *args], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert proc.returncode == 2, (args, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr
