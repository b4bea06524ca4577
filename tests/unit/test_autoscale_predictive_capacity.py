"""Issue 29: predictive scaling forecasts token work, learns what a replica serves while
the fleet is busy, and keeps a queue-depth floor under a wrong forecast."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.scaling import FleetCounts, ScalingPolicy, load_policy
from burstguard.core.scaling.capacity import CapacityLearner, LearnerParams
from burstguard.core.scaling.predictive import PredictiveAutoscaler, PredictiveParams
from burstguard.core.scaling.signals import SIGNAL_NAMES
from burstguard.core.scaling.work import WorkMeter
from burstguard.live.gateway.metrics import GatewayMetrics, GaugeSnapshot
from burstguard.sim.cli import fleet_gateway
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize
from burstguard.workload.transform import merge, take

PROFILE = "llama3-8b-h100"
TOKEN_COUNTERS = (
    "burstguard_prompt_tokens_total",
    "burstguard_refused_prompt_tokens_total",
    "burstguard_completed_requests_total",
    "burstguard_completed_prompt_tokens_total",
    "burstguard_output_tokens_total",
)


def predictive(**changes: object) -> ScalingPolicy:
    policy = load_policy("predictive")
    return policy.model_copy(update={"predictive": replace(policy.predictive, **changes)})  # type: ignore[type-var]


def poisson(rate: float, prompt: int, output: int, duration_s: float, seed: int) -> Workload:
    return synthesize(PatternSpec(pattern="poisson", duration_s=duration_s, rate=rate,
                                  seed=seed, prompt_tokens=str(prompt),
                                  output_tokens=str(output)))  # fmt: skip


def swept_capacity(profile: Profile, prompt: int, output: int) -> float:
    """Tokens per second one replica behind the fleet gateway serves, from a sweep of
    offered loads (a rough guess at 1x, 1.5x, 2x): the most completed tokens per second
    over the last 3 of 5 minutes."""
    best = 0.0
    for tokens_s in (20_000.0, 30_000.0, 40_000.0):
        w = poisson(tokens_s / (prompt + output), prompt, output, 300, seed=7)
        res = simulate_gateway(w, EngineConfig(), profile, fleet_gateway(1), 1)
        served = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in res.records
                     if r.ok and 120 <= r.scheduled_s + (r.e2e_s or 0.0) < 300)  # fmt: skip
        best = max(best, served / 180)
    return best


def test_learned_capacity_reaches_the_swept_one_and_follows_the_mix_change() -> None:
    """Replicas of one GPU, a prior from another (the A100 profile: ~0.3x): within 10
    minutes of busy traffic the learned capacity is within 15% of what a sweep measures
    for the mix, for 512/128 tokens and again after the mix turns to 2048/512."""
    profile = Profile.load(PROFILE)
    sweep = {mix: swept_capacity(profile, *mix) for mix in ((512, 128), (2048, 512))}
    half = 900.0
    # 1.3x what one replica serves, so the one replica there is busy throughout
    first = poisson(1.3 * sweep[512, 128] / 640, 512, 128, half, seed=1)
    second = poisson(1.3 * sweep[2048, 512] / 2560, 2048, 512, half, seed=2)
    second.arrival_s = second.arrival_s + half
    policy = predictive(prior_profile="llama3-8b-a100", min_replicas=1, max_replicas=1)

    def learned(pol: ScalingPolicy, workload: Workload) -> np.ndarray:
        res = simulate_gateway(workload, EngineConfig(), profile, fleet_gateway(1), 1,
                               scaling=pol)  # fmt: skip
        assert res.scaling is not None
        g = res.scaling["gauges"]
        return np.array([g["t"], g["capacity_tokens_per_s"]]).T

    def at(series: np.ndarray, t: float) -> float:
        return float(series[series[:, 0] <= t][-1, 1])

    caps = learned(policy, merge([first, second]))
    prior_first = at(caps, 60.0)
    assert prior_first < 0.8 * sweep[512, 128]  # the prior is off, so learning must do it
    assert at(caps, 600.0) == pytest.approx(sweep[512, 128], rel=0.15)
    assert at(caps, half) == pytest.approx(sweep[512, 128], rel=0.15)
    assert at(caps, half + 600.0) == pytest.approx(sweep[2048, 512], rel=0.15)
    assert at(caps, 2 * half) == pytest.approx(sweep[2048, 512], rel=0.15)

    # without learning the estimate is the prior's, whatever the fleet serves
    fixed = learned(replace_learning(policy, False), take(first, np.arange(len(first) // 2)))
    assert at(fixed, 600.0) == pytest.approx(prior_first, rel=0.01)
    assert at(fixed, 600.0) < 0.85 * sweep[512, 128]


def replace_learning(policy: ScalingPolicy, on: bool) -> ScalingPolicy:
    assert policy.predictive is not None
    return policy.model_copy(update={"predictive": replace(policy.predictive, learn_capacity=on)})


def test_a_burst_after_a_long_idle_gets_the_reactive_floor() -> None:
    """Two hours of silence teach the forecast that nothing comes; a burst of 600
    requests then queues, and the policy orders at least what the queue-depth policy
    would (ceil(queue / 5)), saying the floor decided."""
    quiet = poisson(0.5, 512, 128, 20, seed=3)
    burst = poisson(600 / 5.0, 512, 128, 5, seed=4)
    burst.arrival_s = burst.arrival_s + 7200.0
    policy = predictive(min_replicas=1, max_replicas=40)
    res = simulate_gateway(merge([quiet, burst]), EngineConfig(), Profile.load(PROFILE),
                           fleet_gateway(40), 1, scaling=policy)  # fmt: skip
    assert res.scaling is not None
    up = [e for e in res.scaling["scale_events"] if e["t"] >= 7200 and e["desired"] > 1]
    assert up, "no scale-up after the burst"
    first = up[0]
    assert first["t"] <= 7200 + 10  # at the first tick that sees the queue grow
    assert "floor" in first["reason"].split(" decided")[0]
    q = res.scaling["queue_depth"]
    queued = max(v for t, v in zip(q["t"], q["value"], strict=True) if 7200 <= t <= first["t"])
    assert first["desired"] >= min(40, math.ceil(queued / 5) - 5)  # the queue at its tick
    assert first["floor_replicas"] >= first["forecast_replicas"] + 5  # not the forecast's


def test_the_floor_is_what_decides_after_idle_at_the_policy_level() -> None:
    """The core alone: after idle the forecast and the backlog term both want 1-2
    replicas for a queue of 200; the floor asks ceil(200 / 5) = 40."""
    prior = lambda prompt, output: 30_000.0  # noqa: E731
    p = PredictiveParams(max_replicas=100, scale_down_window_s=0)
    auto = PredictiveAutoscaler(p, initial_replicas=1, lead_time_s=86.0, prior=prior)
    signals = {n: 0.0 for n in SIGNAL_NAMES}
    for t in range(0, 7200, 5):
        auto.tick(float(t), signals, FleetCounts(0, 1, 0))
    assert auto.desired == 1
    burst = dict(signals, llm_request_queue_depth=200.0, burstguard_arrivals_total=200.0,
                 burstguard_prompt_tokens_total=200 * 512.0)  # fmt: skip
    decision = auto.tick(7200.0, burst, FleetCounts(0, 1, 0))
    assert decision is not None and decision.desired == 40
    assert decision.reason.startswith("predictive: floor decided")
    assert decision.detail["forecast_replicas"] < 40 and decision.detail["backlog_replicas"] < 40


def test_work_meter_counts_servable_prompt_tokens_and_the_served_mix() -> None:
    meter = WorkMeter("burstguard_arrivals_total", mix_window_s=60)
    names = ("burstguard_arrivals_total", *TOKEN_COUNTERS)
    assert meter.update(0.0, dict.fromkeys(names, 0.0)) is None
    # 10 arrivals of 1,000 prompt tokens; 5 of 10,000 refused; 4 completed with 100 out each
    s = meter.update(5.0, dict(zip(names, (15.0, 60_000.0, 50_000.0, 4.0, 4_000.0, 400.0),
                                   strict=True)))  # fmt: skip
    assert s is not None
    assert s.served == 4_400.0 and s.served_mix == (1_000.0, 100.0)
    assert s.prompt_per_request == 1_000.0 and s.output_per_request == 100.0
    # the refused share (50,000 of 54,000 answered) is no work: 60,000 x 4/54 arrive
    assert s.prompt * 5 == pytest.approx(60_000 * 4_000 / 54_000)
    assert s.output == pytest.approx(s.prompt * 0.1)


def test_learner_moves_at_a_bounded_pace_and_only_after_enough_busy_time() -> None:
    learner = CapacityLearner(LearnerParams(window_s=300, min_busy_s=150,
                                            max_change_per_min=2.0))  # fmt: skip
    for _ in range(29):  # 145 busy seconds at 5x the prior: not enough yet
        learner.observe(5.0, 5 * 5.0 * 1000.0, 5.0, 1000.0)
    assert learner.correction == 1.0
    learner.observe(5.0, 5 * 5.0 * 1000.0, 5.0, 1000.0)
    assert learner.correction == pytest.approx(2 ** (5 / 60))  # one 5 s step of 2x/minute
    for _ in range(12 * 3):
        learner.observe(5.0, 5 * 5.0 * 1000.0, 5.0, 1000.0)
    assert learner.correction == pytest.approx(5.0)


def test_gateway_exports_the_token_counters_the_policy_reads() -> None:
    snapshot = GaugeSnapshot(queue_depth={"standard": 0}, queue_tokens=0, in_flight=0,
                             in_flight_tokens=0)  # fmt: skip
    m = GatewayMetrics(lambda: snapshot, lambda: 0.0)
    m.prompt_arrived("standard", 700)
    m.completed("standard", 500, 40)
    m.refused_work("standard", 200)
    text = m.render().decode()
    for name in TOKEN_COUNTERS:
        assert name in SIGNAL_NAMES
        assert f'{name}{{class="standard"}}' in text
    assert m.work.prompt_tokens == 700 and m.work.completed_requests == 1
