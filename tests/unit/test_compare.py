"""The steady-vs-burst verdict (pure) and the `compare` command's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from burstguard.report.compare import (
    Thresholds,
    Tolerances,
    compare,
    compare_baseline,
    queue_drain,
    server_column,
)
from burstguard.wire.records import RequestRecord, write_records
from burstguard.wire.summary import summarize, write_summary

BURSTGUARD = [sys.executable, "-m", "burstguard.cli"]


def make_records(
    ttfts: list[float], *, tpot: float = 0.02, tokens: int = 50
) -> list[RequestRecord]:
    """Completed streaming requests, one sent every 0.1 s."""
    out = []
    for i, ttft in enumerate(ttfts):
        e2e = ttft + tpot * (tokens - 1)
        out.append(
            RequestRecord(
                id=f"r{i}",
                scheduled_s=i * 0.1,
                sent_s=i * 0.1,
                status=200,
                ttft_s=ttft,
                e2e_s=e2e,
                itl_s=[tpot] * (tokens - 1),
                prompt_tokens=100,
                completion_tokens=tokens,
            )
        )
    return out


def summary_of(records: list[RequestRecord], **extra: object) -> dict:
    return summarize(records, duration_s=len(records) * 0.1, extra=extra or None)


STEADY = summary_of(make_records([0.10] * 200))


def test_same_load_passes() -> None:
    verdict = compare(STEADY, summary_of(make_records([0.11] * 200)))
    assert verdict.passed
    assert verdict.check("ttft_p95_ratio").value == pytest.approx(1.1)
    assert verdict.check("ttft_p95_ratio").status == "pass"


def test_ttft_ratio_over_limit_fails_and_over_five_is_serious() -> None:
    fails = compare(STEADY, summary_of(make_records([0.3] * 200)))
    assert not fails.passed and not fails.serious
    assert fails.check("ttft_p95_ratio").status == "fail"
    serious = compare(STEADY, summary_of(make_records([0.1] * 150 + [0.6] * 50)))
    assert serious.check("ttft_p95_ratio").value == pytest.approx(6.0)
    assert serious.check("ttft_p95_ratio").status == "serious"
    assert serious.serious and not serious.passed


def test_ratio_limit_is_configurable() -> None:
    burst = summary_of(make_records([0.3] * 200))
    assert compare(STEADY, burst, Thresholds(max_ttft_p95_ratio=3.5)).passed


def test_tpot_instability_fails() -> None:
    verdict = compare(STEADY, summary_of(make_records([0.1] * 200, tpot=0.04)))
    assert verdict.check("tpot_p95_ratio").status == "fail"
    assert verdict.check("itl_p95_ratio").value == pytest.approx(2.0)
    assert verdict.check("ttft_p95_ratio").status == "pass"


def test_slo_attainment_below_minimum_fails() -> None:
    # SLO TTFT 0.5 s: 10% of the burst leg misses it -> 90% < 95%
    burst = summary_of(make_records([0.1] * 180 + [0.8] * 20))
    verdict = compare(STEADY, burst, Thresholds(max_ttft_p95_ratio=100, serious_ttft_p95_ratio=100))
    assert verdict.check("slo_steady").status == "pass"
    assert verdict.check("slo_burst").value == pytest.approx(0.9)
    assert verdict.check("slo_burst").status == "fail"
    assert not verdict.passed


def test_non_streaming_legs_skip_itl_but_empty_burst_fails() -> None:
    steady = make_records([0.1] * 20)
    for r in steady:
        r.itl_s = []
    verdict = compare(summary_of(steady), summary_of([*steady]))
    assert verdict.check("itl_p95_ratio").status == "n/a"
    assert verdict.passed
    failed = [RequestRecord(id="x", scheduled_s=0.0, sent_s=0.0, error="timeout")]
    empty = compare(STEADY, summary_of(failed))
    assert empty.check("ttft_p95_ratio").status == "fail"
    assert empty.check("slo_burst").value == 0.0


def test_rate_mismatch_is_reported() -> None:
    slow = summarize(make_records([0.1] * 200), duration_s=100.0)
    verdict = compare(STEADY, slow)
    assert verdict.check("rate_ratio").status == "info"
    assert "same mean rate" in verdict.check("rate_ratio").note


def test_queue_drain_measures_peak_to_empty() -> None:
    t = np.arange(12, dtype=float)
    waiting = np.array([0, 5, 20, 10, 2, 0, 0, 8, 30, 0, 0, 0], dtype=float)
    drain = queue_drain(t, waiting, level=0.0)
    assert drain.drain_s == [3.0, 1.0]  # peak at 2 -> 0 at 5; peak at 8 -> 0 at 9
    assert drain.peak == 30 and not drain.undrained
    stuck = queue_drain(t, np.linspace(0, 50, 12), level=0.0)
    assert stuck.undrained


def _with_queue(summary: dict, waiting: list[float]) -> dict:
    series = {
        "t": list(range(len(waiting))),
        'vllm:num_requests_waiting{model_name="m"}': waiting,
        'vllm:kv_cache_usage_perc{model_name="m"}': [w / 100 for w in waiting],
    }
    return {**summary, "server_series": series}


def test_queue_drain_check_from_scraped_series() -> None:
    steady = _with_queue(STEADY, [0, 1, 0, 0, 1, 0])
    drains = _with_queue(STEADY, [0, 40, 60, 20, 1, 0, 0, 30, 0])
    verdict = compare(steady, drains)
    check = verdict.check("queue_drain")
    assert check.status == "pass" and check.value == pytest.approx(2.0)  # level = steady p95
    assert verdict.check("kv_peak").burst == pytest.approx(0.6)
    assert compare(steady, drains, Thresholds(max_drain_s=1.0)).check("queue_drain").status == (
        "fail"
    )
    grows = compare(steady, _with_queue(STEADY, [0, 10, 20, 40, 80]))
    assert grows.check("queue_drain").status == "fail"
    assert "accumulating" in grows.check("queue_drain").note
    assert compare(STEADY, STEADY).check("queue_drain").status == "n/a"


def test_server_column_sums_label_sets() -> None:
    summary = {
        "server_series": {
            "t": [0, 1],
            'vllm:num_requests_waiting{model_name="a"}': [1, 2],
            'vllm:num_requests_waiting{model_name="b"}': [3, None],
            "vllm:num_requests_waiting_other": [100, 100],
        }
    }
    col = server_column(summary, ("vllm:num_requests_waiting",))
    assert col is not None and col.tolist() == [4.0, 2.0]
    assert server_column(summary, ("vllm:kv_cache_usage_perc",)) is None


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="min_slo"):
        Thresholds(min_slo=1.5)
    with pytest.raises(ValueError, match="serious"):
        Thresholds(max_ttft_p95_ratio=6, serious_ttft_p95_ratio=5)


def _run_dir(tmp_path: Path, name: str, records: list[RequestRecord]) -> Path:
    run = tmp_path / name
    write_records(run / "records.jsonl", records)
    write_summary(run / "summary.json", summary_of(records))
    return run


def test_compare_command_exit_codes(tmp_path: Path) -> None:
    steady = _run_dir(tmp_path, "steady", make_records([0.1] * 100))
    burst = _run_dir(tmp_path, "burst", make_records([0.1] * 80 + [0.9] * 20))
    same = subprocess.run(
        [*BURSTGUARD, "compare", str(steady), str(steady / "summary.json"), "--json"],
        capture_output=True,
        text=True,
    )
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["passed"] is True
    report = tmp_path / "cmp.html"
    worse = subprocess.run(
        [*BURSTGUARD, "compare", str(steady), str(burst), "--report", str(report)],
        capture_output=True,
        text=True,
    )
    assert worse.returncode == 1, worse.stderr
    assert "FAIL" in worse.stdout and "P95 TTFT" in worse.stdout
    assert report.stat().st_size > 1_000_000  # plotly.js is inlined
    (tmp_path / "junk.json").write_text('{"schema": "other"}')
    for bad in (tmp_path / "missing.json", tmp_path / "junk.json"):
        proc = subprocess.run(
            [*BURSTGUARD, "compare", str(steady), str(bad)], capture_output=True, text=True
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [*BURSTGUARD, "compare", str(steady), str(burst), "--min-slo", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "min_slo" in proc.stderr


def test_preemptions_above_their_limit_fail_and_none_pass() -> None:
    preempting = summary_of(make_records([0.1] * 200), preemptions=12)
    clean = summary_of(make_records([0.1] * 200), preemptions=0)
    th = Thresholds(max_preemptions=0)
    assert not compare(STEADY, preempting, th).passed
    assert compare(STEADY, preempting, th).check("preemptions").status == "fail"
    assert compare(STEADY, clean, th).passed
    assert compare(STEADY, preempting).check("preemptions").status == "info"  # no limit set


def test_preemptions_from_a_scraped_counter_and_kv_peak_limit() -> None:
    series = {"t": [0, 1, 2], "vllm:num_preemptions_total": [40, 41, 45],
              "vllm:kv_cache_usage_perc": [0.2, 0.97, 0.5]}  # fmt: skip
    burst = {**summary_of(make_records([0.1] * 200)), "server_series": series}
    verdict = compare(STEADY, burst, Thresholds(max_preemptions=4, max_kv_peak=0.9))
    assert verdict.check("preemptions").burst == 5  # the counter's increase, not its value
    assert verdict.check("preemptions").status == "fail"
    assert verdict.check("kv_peak").status == "fail"


def test_retry_amplification_over_limit_fails() -> None:
    records = make_records([0.1] * 200)
    for r in records[:100]:
        r.retries = 1
    verdict = compare(STEADY, summary_of(records))
    check = verdict.check("retry_amplification")
    assert check.value == pytest.approx(1.5) and check.status == "fail"
    assert compare(STEADY, STEADY).check("retry_amplification").status == "pass"


def test_itl_jitter_fails_when_the_burst_stalls_the_stream() -> None:
    jittery = make_records([0.1] * 200)
    for r in jittery:  # two stalls per stream (4% of the gaps): p99 ITL far above p50
        r.itl_s[5] = r.itl_s[30] = 0.5
    verdict = compare(STEADY, summary_of(jittery))
    assert verdict.check("itl_jitter_ratio").status == "fail"
    assert verdict.check("itl_p95_ratio").status == "pass"  # the p95 alone does not see it


def test_client_lag_makes_the_verdict_invalid() -> None:
    late = make_records([0.1] * 200)
    for r in late[100:]:
        r.sent_s = r.scheduled_s + 2.0  # the client fell 2 s behind its schedule
    verdict = compare(STEADY, summary_of(late))
    assert not verdict.valid and not verdict.passed
    assert "client was the bottleneck" in verdict.invalid[0]
    assert compare(STEADY, summary_of(late), Thresholds(max_schedule_lag_s=5)).valid


def test_baseline_gate_tolerates_noise_and_fails_a_regression() -> None:
    old = summary_of(make_records([0.10] * 200))
    assert compare_baseline(old, summary_of(make_records([0.105] * 200))).passed
    slower = compare_baseline(old, summary_of(make_records([0.13] * 200)))
    assert not slower.passed and slower.kind == "baseline"
    assert slower.check("ttft_p95_regression").status == "fail"
    assert compare_baseline(old, summary_of(make_records([0.13] * 200)),
                            Tolerances(latency=0.5)).passed  # fmt: skip


def test_compare_command_exit_codes_for_new_gates(tmp_path: Path) -> None:
    steady = _run_dir(tmp_path, "steady", make_records([0.1] * 100))
    late = make_records([0.1] * 100)
    for r in late:
        r.sent_s = r.scheduled_s + 3.0
    lagging = _run_dir(tmp_path, "lagging", late)
    proc = subprocess.run([*BURSTGUARD, "compare", str(steady), str(lagging)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2, proc.stdout
    assert "invalid run" in proc.stderr and "client was the bottleneck" in proc.stderr
    slower = _run_dir(tmp_path, "slower", make_records([0.2] * 100))
    for new, code in ((steady, 0), (slower, 1)):
        proc = subprocess.run(
            [*BURSTGUARD, "compare", "--baseline", str(steady), str(new), "--json"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["kind"] == "baseline"
    proc = subprocess.run([*BURSTGUARD, "compare", str(steady)], capture_output=True, text=True)
    assert proc.returncode == 2 and "error:" in proc.stderr
