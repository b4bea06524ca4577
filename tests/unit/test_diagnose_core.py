"""diagnose's pure core: the steps on simulated runs (deterministic), the first root cause
rule, and what it says when data is missing."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.diagnose.run import RunData
from burstguard.diagnose.walk import diagnose
from burstguard.sim.loop import simulate
from burstguard.wire.summary import summarize
from burstguard.workload.synth import PatternSpec, synthesize

H100 = Profile.load("llama3-8b-h100")


def sim_run(config: EngineConfig, pattern: str = "burst", **shape: str) -> RunData:
    spec = PatternSpec(pattern=pattern, duration_s=60, rate=2 if pattern == "poisson" else None,
                       prompt_tokens=shape.get("prompt", "512"),
                       output_tokens=shape.get("output", "128"))  # fmt: skip
    result = simulate(synthesize(spec), config, H100)
    summary = summarize(result.records, duration_s=60, source="sim",
                        extra={"preemptions": result.preemptions, "engine": asdict(config),
                               "server_series": result.series})  # fmt: skip
    return RunData.from_summary("sim", summary, result.records)


@pytest.mark.parametrize(
    ("config", "shape", "cause"),
    [
        (EngineConfig(max_num_seqs=4), {}, "queue"),
        (EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096,
                      max_model_len=4096), {"prompt": "3500", "output": "64"}, "batch_building"),
        (EngineConfig(gpu_memory_utilization=0.25), {"prompt": "4000", "output": "256"},
         "kv_memory"),
    ],
)  # fmt: skip
def test_first_root_cause_of_simulated_runs(
    config: EngineConfig, shape: dict[str, str], cause: str
) -> None:
    d = diagnose(sim_run(config, **shape))
    assert d.first_cause == cause
    assert d.finding("queue").found  # every one of them queues: the symptom
    if cause != "queue":
        assert d.finding("queue").evidence["caused_by"] == cause
    assert d.finding(cause).fixes  # type: ignore[arg-type]


def test_healthy_steady_sim_finds_nothing() -> None:
    d = diagnose(sim_run(EngineConfig(), pattern="poisson"))
    assert d.first_cause is None
    assert [f.status for f in d.findings] == ["not_found"] * 4 + ["cannot_tell"]


def test_a_run_without_scraped_metrics_cannot_tell_and_says_what_is_missing() -> None:
    run = sim_run(EngineConfig(max_num_seqs=4))
    bare = {k: v for k, v in run.summary.items() if k not in ("server_series", "preemptions")}
    d = diagnose(RunData.from_summary("bare", bare))
    for step in ("queue", "batch_building", "kv_memory", "scaling_lag"):
        f = d.finding(step)  # type: ignore[arg-type]
        assert f.status == "cannot_tell" and f.missing, step
    assert "--scrape-metrics" in d.finding("queue").missing[0]
    assert d.first_cause is None


def test_scaling_lag_from_a_replica_series() -> None:
    t = list(range(60))
    waiting = [0] * 5 + [50] * 45 + [0] * 10
    for rise_at, found in ((10, False), (45, True)):
        replicas = [1] * rise_at + [2] * (60 - rise_at)
        series = {"t": t, "vllm:num_requests_waiting": waiting, "replicas": replicas,
                  "vllm:num_requests_running": [8] * 60,
                  "vllm:kv_cache_usage_perc": [0.3] * 60}  # fmt: skip
        summary = {**summarize([], duration_s=60), "server_series": series}
        summary["engine"] = {"max_num_seqs": 8}
        d = diagnose(RunData.from_summary("fleet", summary))
        lag = d.finding("scaling_lag")
        assert lag.found is found, lag
        assert lag.evidence["first_scale_up_after_s"] == rise_at - 5
        assert d.first_cause == ("scaling_lag" if found else "queue")
