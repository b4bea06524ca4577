"""`bench --sweep` against the emulator (4 sequences at a time, so it saturates early):
the knee lies within one step of where the simulator puts it for the same profile and
shape, judged by the same functions over the same window; the sweep stops after the first
load that misses, writes each point's run and the evidence, draws its plot, and hands its
knee to `--scenario steady-vs-burst`; a closed-loop sweep's knee is the engine's batch.
Bad sweep flags exit 2 before any target is asked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import BURSTGUARD, start_emulator

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import PROFILES_DIR, Profile
from burstguard.report.sweep import Point, StopRule, Window, find_knee, point_from_records
from burstguard.sim.loop import simulate
from burstguard.wire.summary import Slo, read_summary
from burstguard.workload.synth import PatternSpec, synthesize

# the packaged profile by its path: a machine's own calibration of `smollm2-135m-cpu`
# (cached by `make test`'s calibrate test) would stand in for the name, and the knee with it
PROFILE = str(PROFILES_DIR / "smollm2-135m-cpu.yaml")
SEQS, SPEEDUP = 4, 20.0
SHAPE = ["--duration", "60", "--prompt-tokens", "32", "--output-tokens", "16"]
SWEEP = ["--sweep", "rate=0.5:3.5:0.5", "--slo", "ttft=1.5,tpot=0.15", *SHAPE]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=120)


def sim_points(doc: dict) -> list[Point]:
    """Every rate of the sweep in the simulator (same profile, engine and workloads),
    measured over the live sweep's window."""
    window, slo = Window(**doc["window"]), Slo(**doc["slo"])
    points = []
    for rate in doc["values"]:
        workload = synthesize(PatternSpec(pattern="poisson", rate=rate, duration_s=60, seed=0,
                                          prompt_tokens="32", output_tokens="16"))  # fmt: skip
        sim = simulate(workload, EngineConfig(max_num_seqs=SEQS), Profile.load(PROFILE))
        points.append(point_from_records(rate, sim.records, window, slo))
    return points


def test_the_live_knee_lies_where_the_sim_saturates(tmp_path: Path) -> None:
    out, report = tmp_path / "sweep", tmp_path / "sweep.html"
    with start_emulator(tmp_path, "--max-num-seqs", str(SEQS), profile=PROFILE,
                        speedup=SPEEDUP) as proc:  # fmt: skip
        target = proc.base_url  # type: ignore[attr-defined]
        res = run("bench", "--target", target, *SWEEP, "--speedup", str(SPEEDUP),
                  "--out", str(out), "--report", str(report))  # fmt: skip
        assert res.returncode == 0, res.stderr
        doc = json.loads((out / "sweep.json").read_text())
        scenario = ["bench", "--target", target, "--scenario", "steady-vs-burst"]
        steady = run(*scenario, "--steady-from-sweep", str(out), "--duration", "20",
                     "--speedup", str(SPEEDUP), "--prompt-tokens", "32", "--output-tokens",
                     "16", "--out", str(tmp_path / "scenario"))  # fmt: skip
        missing = run(*scenario, "--steady-from-sweep", str(tmp_path), "--out", str(tmp_path / "x"))
        users = run("bench", "--target", target, "--sweep", "concurrency=2,4,8", *SHAPE,
                    "--slo", "ttft=5,tpot=0.5", "--speedup", str(SPEEDUP), "--quiet",
                    "--out", str(tmp_path / "users"))  # fmt: skip
    print(res.stdout)
    live = doc["knee"]
    sim = find_knee(sim_points(doc), StopRule(**doc["stop"]))
    steps = doc["values"]
    print(f"knee: live {live['load']} req/s, sim {sim.load} req/s ({sim.reason})")
    assert live["load"] is not None and sim.load is not None
    assert abs(steps.index(live["load"]) - steps.index(sim.load)) <= 1
    # it stopped at the first load that missed, and that load's TTFT had jumped
    points = doc["points"]
    assert doc["stopped"] and "SLO attainment" in doc["stopped"]
    assert len(points) == steps.index(live["load"]) + 2 < len(steps)
    assert points[-1]["ttft_p95_s"] >= 2 * points[0]["ttft_p95_s"]
    assert "slo" in live["limited_by"] and live["bounded"]
    # the evidence: each point its own run, its figures; the knee in the output
    for p in points:
        summary = read_summary(out / p["dir"] / "summary.json")
        assert summary["requests"] >= p["requests"] > 0 and p["errors"] == 0
    assert f"knee: {live['load']:g} req/s" in res.stdout and "[sweep 1/7]" in res.stdout
    assert "plot-sweep" in report.read_text()
    again = run("report", str(out), "--out", str(tmp_path / "again.html"))
    assert again.returncode == 0 and "plot-sweep" in (tmp_path / "again.html").read_text()
    # the scenario's steady leg ran Poisson at the knee rate
    assert steady.returncode in (0, 1), steady.stderr
    leg = read_summary(tmp_path / "scenario" / "steady" / "summary.json")
    assert leg["workload"]["mean_rate_rps"] == live["load"] and leg["mode"] == "open"
    assert missing.returncode == 2 and "no such file" in missing.stderr
    # closed loop: throughput grows until the engine's 4 sequences are full
    assert users.returncode == 0, users.stderr
    closed = json.loads((tmp_path / "users" / "sweep.json").read_text())
    print(users.stdout)
    assert closed["knee"]["load"] == SEQS and closed["knee"]["limited_by"] == ["throughput"]


def test_bad_sweep_flags_exit_2_with_the_reason(tmp_path: Path) -> None:
    base = ["bench", "--target", "http://127.0.0.1:9", "--out", str(tmp_path / "o")]
    for extra, says in (
        (["--sweep", "rate=a"], "not a list or range"),
        (["--sweep", "load=1,2"], "expected rate=A,B"),
        (["--sweep", "rate=1,2", "--rate", "3"], "drop --rate"),
        (["--sweep", "rate=1,2", "--concurrency", "4"], "not with --concurrency"),
        (["--sweep", "concurrency=1,2", "--pattern", "burst"], "drop --pattern"),
        (["--sweep", "rate=1", "--duration", "10", "--warmup", "6", "--cooldown", "4"],
         "leave nothing"),
        (["--sweep", "rate=1", "--stop-below-slo", "90"], "share between 0 and 1"),
        (["--steady-from-sweep", str(tmp_path)], "sets --scenario's steady leg"),
    ):  # fmt: skip
        res = run(*base, *extra)
        assert res.returncode == 2 and says in res.stderr, (extra, res.stderr)
