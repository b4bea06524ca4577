"""Knative KPA panic mode, the predictive forecast, the fleet state machine, cold starts."""

from __future__ import annotations

import math
import random

import pytest

from burstguard.core.scaling.cold_start import COLD_START_PRESETS, ColdStartModel
from burstguard.core.scaling.kpa import KpaAutoscaler, KpaParams
from burstguard.core.scaling.predictive import PredictiveAutoscaler, PredictiveParams, forecast_rate
from burstguard.core.scaling.replica_pool import (
    DrainReplica,
    FleetCounts,
    ReplicaPool,
    ReplicaReady,
    StartReplica,
    StopReplica,
    count_reversals,
)

# -- KPA ------------------------------------------------------------------------------------


def _kpa_run(
    concurrency: dict[float, float], until: int, ready: int = 2
) -> list[tuple[float, int, bool]]:
    """Ticks every second with `ready` ready pods (new ones still starting)."""
    kpa = KpaAutoscaler(
        KpaParams(target_concurrency=10, target_utilization=1.0, min_replicas=1, max_replicas=50),
        initial_replicas=ready,
    )
    out, c = [], 0.0
    for t in range(until + 1):
        c = concurrency.get(float(t), c)
        kpa.tick(float(t), {"llm_request_queue_depth": c}, FleetCounts(0, ready, 0))
        out.append((float(t), kpa.desired, kpa.panicking))
    return out


def test_kpa_stable_window_sizes_to_target_concurrency() -> None:
    series = _kpa_run({0.0: 30.0}, until=120)
    assert series[-1][1] == 3  # ceil(30 / 10); no panic at 30 / 10 / 2 ready = 1.5 < 2
    assert not any(p for _, _, p in series)


def test_kpa_panics_at_200_percent_and_never_scales_down_while_panicking() -> None:
    series = _kpa_run({0.0: 20.0, 100.0: 100.0, 110.0: 20.0}, until=300)
    panic = [(t, d) for t, d, p in series if p]
    assert panic[0][0] <= 104  # the 6 s panic window crosses 2 x 2 ready pods within seconds
    peak = max(d for _, d in panic)
    assert peak >= 8  # panic count: the 6 s average of ~100 / 10, well above the stable ~3
    after_peak = [d for t, d in panic if t >= next(t for t, d in panic if d == peak)]
    assert all(d == peak for d in after_peak)  # no scale-down while panicking
    last_over = max(t for t, d in panic)
    assert 160 <= last_over <= 175  # panic ends one stable window after the last crossing
    assert series[-1][1] < peak  # and then the stable window brings it down


# -- predictive -------------------------------------------------------------------------------


def _predictive(**kw: object) -> PredictiveParams:
    return PredictiveParams(**({"rate_per_replica": 4.0, "max_replicas": 50} | kw))  # type: ignore[arg-type]


def test_forecast_views() -> None:
    p = _predictive(trend_window_s=50, burst_window_s=50, burst_quantile=1.0)
    ramp = [float(i) for i in range(10)]  # +1/s per 5 s bin
    f = forecast_rate(ramp, p, lead_time_s=25.0)  # 5 bins ahead of the last (9): 14, cap 1.25 x 9
    assert f.trend == pytest.approx(11.25)
    assert f.burst == 9.0 and f.burst_index == pytest.approx(9 / 4.5)
    seasonal = _predictive(season_s=50, trend_window_s=50, burst_window_s=5)
    history = [1.0] * 10 + [1.0] * 10
    history[11] = 40.0  # one season ago, one bin after "now - season"
    assert forecast_rate(history, seasonal, lead_time_s=10.0).seasonal == 40.0


def test_predictive_backlog_waits_for_starting_replicas() -> None:
    """No cascade: a backlog adds replicas only when none are starting."""
    params = _predictive(backlog_drain_s=60, scale_down_window_s=180)
    auto = PredictiveAutoscaler(params, initial_replicas=1, lead_time_s=100.0)
    total = 0.0

    def tick(t: int, queue: float, starting: int, ready: int) -> int:
        nonlocal total
        total += 4.0 * 5  # a steady 4/s: one replica's worth
        signals = {"burstguard_arrivals_total": total, "llm_request_queue_depth": queue}
        auto.tick(float(t), signals, FleetCounts(starting, ready, 0))
        return auto.desired

    assert [tick(t, 0.0, 0, 1) for t in range(0, 60, 5)][-1] == 1
    assert [tick(t, 1000.0, 1, 1) for t in range(60, 200, 5)] == [1] * 28  # starting: frozen
    # nothing starting: 1 replica would need ceil((1000 / 160 + 4) / 4) = 3 to drain 1000 in
    # 100 + 60 s; new ones serve after 100 s, when one replica that just keeps up with 4/s
    # still has 1000 queued: ceil((1000 / 60 + 4) / 4) = ceil(5.17) = 6
    assert tick(200, 1000.0, 0, 1) == 6
    # with 6 there, 3 would do: the 180 s scale-down window holds 6 until it has passed
    assert [tick(t, 1000.0, 0, 6) for t in range(205, 380, 5)] == [6] * 35
    assert tick(380, 1000.0, 0, 6) == 3


def test_predictive_rates_are_counts_over_the_time_they_came_in() -> None:
    """A live tick comes late (its timer, its scrape): a steady 3 req/s must still read
    3/s in every bin, not the late tick's longer count over one bin (up to 2x here, which
    the burst quantile would keep as an extra replica)."""
    params = _predictive(rate_per_replica=3.0, bin_s=2.0, trend_window_s=60,
                         burst_window_s=60, burst_quantile=1.0, scale_down_window_s=0)  # fmt: skip
    auto = PredictiveAutoscaler(params, initial_replicas=1, lead_time_s=10.0)
    late = [0.0, 1.5, 0.1, 1.9, 0.4, 1.2, 0.0, 0.8]
    for k in range(40):
        now = auto.next_tick_at() + late[k % len(late)]
        auto.tick(now, {"burstguard_arrivals_total": 3.0 * now}, FleetCounts(0, 1, 0))
    assert auto.forecast.burst == pytest.approx(3.0)
    assert auto.forecast.rate == pytest.approx(3.0)
    assert auto.desired == 1


# -- the fleet --------------------------------------------------------------------------------


def test_fleet_lifecycle_and_replica_seconds() -> None:
    fleet = ReplicaPool(ColdStartModel.fixed(60.0), initial_ready=1, drain_timeout_s=30.0)
    effects = fleet.scale_to(3, now=0.0)
    assert [type(e) for e in effects] == [StartReplica, StartReplica]
    assert all(e.ready_at == 60.0 for e in effects if isinstance(e, StartReplica))
    assert fleet.counts() == FleetCounts(starting=2, ready=1, draining=0)
    assert fleet.next_event_at() == 60.0
    assert [type(e) for e in fleet.advance(60.0)] == [ReplicaReady, ReplicaReady]
    drain = fleet.scale_to(1, now=100.0)
    assert [type(e) for e in drain] == [DrainReplica, DrainReplica]
    first = drain[0]
    assert isinstance(first, DrainReplica)
    assert fleet.drained(first.replica_id, now=110.0) == [StopReplica(first.replica_id, "drained")]
    assert fleet.advance(130.0) == [StopReplica(drain[1].replica_id, "drain_timeout")]  # type: ignore[union-attr]
    # 3 replicas x 100 s + 2 draining (10 s and 30 s) + 1 x 30 s after
    assert fleet.replica_seconds(130.0) == pytest.approx(300 + 10 + 30 + 30)
    # one point per change; at t = 0 the order replaced the initial state
    assert [(s.desired, s.starting, s.ready, s.draining) for s in fleet.history] == [
        (3, 2, 1, 0),
        (3, 0, 3, 0),
        (1, 0, 1, 2),
        (1, 0, 1, 1),
        (1, 0, 1, 0),
    ]


def test_scale_down_cancels_starting_replicas_first() -> None:
    fleet = ReplicaPool(ColdStartModel.fixed(60.0), initial_ready=2)
    fleet.scale_to(4, now=0.0)
    assert [type(e) for e in fleet.scale_to(2, now=10.0)] == [StopReplica, StopReplica]
    assert fleet.counts() == FleetCounts(0, 2, 0)


def test_live_fleet_waits_for_the_health_check() -> None:
    fleet = ReplicaPool(ColdStartModel.fixed(60.0), initial_ready=1, auto_ready=False)
    (start,) = fleet.scale_to(2, now=0.0)
    assert isinstance(start, StartReplica)
    assert fleet.next_event_at() == math.inf and fleet.advance(120.0) == []
    assert fleet.mark_ready(start.replica_id, now=130.0) == [ReplicaReady(start.replica_id)]
    assert fleet.counts() == FleetCounts(0, 2, 0)


def test_count_reversals() -> None:
    assert count_reversals([1, 2, 3, 3, 2, 1, 2]) == 2
    assert count_reversals([1, 1, 5, 8]) == 0


# -- cold starts ------------------------------------------------------------------------------


def test_cold_start_presets_sum_their_phases() -> None:
    cached = COLD_START_PRESETS["vllm-8b-cached-image"]
    assert cached.mean_s == pytest.approx(34 + 10 + 24.5)
    fresh = COLD_START_PRESETS["vllm-8b-fresh-node"]
    assert fresh.mean_s == pytest.approx(cached.mean_s + 212)
    rng = random.Random(1)
    samples = [fresh.sample(rng) for _ in range(4000)]
    assert sum(samples) / len(samples) == pytest.approx(fresh.mean_s, rel=0.03)
    mixed = COLD_START_PRESETS["vllm-8b-mixed"]
    assert mixed.quantile(0.25) < cached.mean_s * 1.3 < mixed.quantile(0.9)  # bimodal
