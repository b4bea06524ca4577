"""KEDA + HPA semantics against hand-computed cases (kubernetes horizontal.go, KEDA docs)."""

from __future__ import annotations

import pytest

from burstguard.core.scaling.hpa import (
    Behavior,
    Hpa,
    HpaScalingPolicy,
    ScalingRules,
    replicas_for_metric,
)
from burstguard.core.scaling.keda import KedaAutoscaler, KedaParams
from burstguard.core.scaling.promql import Query, ScrapedSeries
from burstguard.core.scaling.replica_pool import FleetCounts

NO_STABILIZATION = ScalingRules(0, (HpaScalingPolicy("Percent", 100, 15),))


# -- the replica calculator: AverageValue and the 10% tolerance --------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (43.0, 4),  # 43 / (10 x 4) = 1.075: within 10%, keep 4
        (44.0, 4),  # 1.10: the band is closed, keep 4
        (45.0, 5),  # 1.125: ceil(45 / 10) = 5
        (37.0, 4),  # 0.925: within, keep 4
        (29.0, 3),  # 0.725: ceil(2.9) = 3
        (0.0, 0),  # nothing to do: the calculator asks 0 (min replicas bound it later)
    ],
)
def test_average_value_with_tolerance(value: float, expected: int) -> None:
    assert replicas_for_metric(value, 10.0, 4) == expected


def test_per_direction_tolerance_and_value_target() -> None:
    # k8s >= 1.33 behavior.scaleUp.tolerance 1%: 41 / 40 = 1.025 now scales to ceil(4.1) = 5
    assert replicas_for_metric(41.0, 10.0, 4, up_tolerance=0.01) == 5
    assert replicas_for_metric(41.0, 10.0, 4) == 4
    # Value target: ratio = 15 / 10 = 1.5 -> ceil(1.5 x 4) = 6
    assert replicas_for_metric(15.0, 10.0, 4, target_type="Value") == 6


# -- behavior: rate policies ---------------------------------------------------------------


def test_default_scale_up_is_the_larger_of_100_percent_and_4_pods_per_15_s() -> None:
    hpa = Hpa(1, 100)  # Kubernetes' default behavior
    assert hpa.normalize(20, current=1, now=0.0) == 5  # max(ceil(1 x 2), 1 + 4)
    hpa.record_scale(1, 5, now=0.0)
    assert hpa.normalize(20, current=5, now=10.0) == 5  # same period: starts at 1 -> still 5
    assert hpa.normalize(20, current=5, now=15.0) == 10  # new period from 5: max(10, 9)
    hpa.record_scale(5, 10, now=15.0)
    assert hpa.normalize(50, current=10, now=30.0) == 20  # max(20, 14)


def test_select_policy_min_takes_the_smaller_step() -> None:
    up = ScalingRules(0, Behavior().scale_up.policies, select_policy="Min")
    hpa = Hpa(1, 100, Behavior(scale_up=up))
    assert hpa.normalize(20, current=1, now=0.0) == 2  # min(ceil(1 x 2), 1 + 4)
    disabled = ScalingRules(0, (), select_policy="Disabled")
    assert Hpa(1, 100, Behavior(scale_up=disabled)).normalize(20, current=3, now=0.0) == 3


def test_scale_down_policies_per_period() -> None:
    one_pod_a_minute = ScalingRules(0, (HpaScalingPolicy("Pods", 1, 60),))
    hpa = Hpa(1, 100, Behavior(scale_down=one_pod_a_minute))
    assert hpa.normalize(2, current=10, now=0.0) == 9
    hpa.record_scale(10, 9, now=0.0)
    assert hpa.normalize(2, current=9, now=30.0) == 9  # period started at 10: 10 - 1 = 9
    assert hpa.normalize(2, current=9, now=61.0) == 8
    half = ScalingRules(0, (HpaScalingPolicy("Percent", 50, 60),))
    assert Hpa(1, 100, Behavior(scale_down=half)).normalize(1, current=9, now=0.0) == 4  # int(4.5)


# -- behavior: stabilization ----------------------------------------------------------------


def test_scale_down_takes_the_max_recommendation_within_the_window() -> None:
    hpa = Hpa(1, 100, Behavior(scale_down=ScalingRules(300, NO_STABILIZATION.policies)))
    current = 10
    for t, rec in [(0, 10), (60, 4), (120, 6), (180, 3), (240, 2)]:
        current = hpa.normalize(rec, current, float(t))
        assert current == 10  # t = 0's 10 is inside every window so far
    current = hpa.normalize(2, current, 301.0)  # window (1, 301]: max(4, 6, 3, 2, 2) = 6
    assert current == 6
    assert hpa.normalize(2, current, 361.0) == 6  # (61, 361]: 6 at t = 120 still in
    assert hpa.normalize(2, 6, 421.0) == 3  # (121, 421]: max(3, 2, 2, 2, 2) = 3


def test_scale_up_stabilization_takes_the_min_within_the_window() -> None:
    up = ScalingRules(60, (HpaScalingPolicy("Pods", 100, 15),))
    hpa = Hpa(1, 100, Behavior(scale_up=up))
    assert hpa.normalize(8, current=2, now=0.0) == 2  # init: (0, current=2) is in the window
    assert hpa.normalize(8, current=2, now=30.0) == 2
    assert hpa.normalize(8, current=2, now=61.0) == 8  # (1, 61]: min(8, 8) = 8


# -- KEDA: scrape, polling, activation, cooldown to zero -------------------------------------


def _keda(**kw: object) -> KedaParams:
    base: dict[str, object] = {
        "query": Query("llm_request_queue_depth"),
        "target": 5.0,
        "min_replicas": 0,
        "max_replicas": 10,
        "behavior": Behavior(scale_down=NO_STABILIZATION),
        "scrape_offset_s": 0.0,  # scrapes at the syncs: hand-computable
    }
    return KedaParams(**(base | kw))  # type: ignore[arg-type]


def _run(
    keda: KedaAutoscaler, queue: dict[float, float] | None, until: float
) -> list[tuple[float, int]]:
    """Ticks every second; `queue` maps a start time to the queue depth from then on."""
    changes, depth = [], 0.0
    for t in range(int(until) + 1):
        depth = (queue or {}).get(float(t), depth)
        if t >= keda.next_tick_at():
            d = keda.tick(
                float(t), {"llm_request_queue_depth": depth}, FleetCounts(0, keda.desired, 0)
            )
            if d is not None:
                changes.append((float(t), d.desired))
    return changes


def test_cooldown_period_scales_to_zero_only_after_it_has_passed() -> None:
    keda = KedaAutoscaler(_keda(cooldown_period_s=300), initial_replicas=2)
    changes = _run(keda, {0.0: 10.0, 100.0: 0.0}, until=500)
    # scrapes at 0, 15, ..., 90 see 10 and at 105 see 0; polls at 0, 30, 60, 90 are active,
    # so the cooldown runs from 90; KEDA scales to zero once 90 + 300 is *before* now: the
    # poll at 390 does not, the one at 420 does
    assert changes[-1] == (420.0, 0)
    assert all(d > 0 for t, d in changes if t < 420)


def test_never_active_scales_to_zero_after_the_initial_cooldown() -> None:
    assert _run(KedaAutoscaler(_keda(), initial_replicas=2), None, 100)[-1] == (30.0, 0)
    late = KedaAutoscaler(_keda(initial_cooldown_s=60), initial_replicas=2)
    assert _run(late, None, 100)[-1] == (90.0, 0)


def test_cooldown_period_does_nothing_with_min_replicas_one() -> None:
    """The seed's `cooldownPeriod: 120` with `minReplicaCount: 1` has no effect at all."""
    short = KedaAutoscaler(_keda(min_replicas=1, cooldown_period_s=0), initial_replicas=4)
    long = KedaAutoscaler(_keda(min_replicas=1, cooldown_period_s=3600), initial_replicas=4)
    series = {0.0: 20.0, 100.0: 0.0}
    assert _run(short, series, 800) == _run(long, series, 800)
    assert short.desired == 1


def test_activation_from_zero_and_activation_threshold() -> None:
    keda = KedaAutoscaler(_keda(), initial_replicas=0)
    changes = _run(keda, {0.0: 0.0, 500.0: 3.0}, until=600)
    assert changes[0] == (510.0, 1)  # scrape at 510 sees 3 > 0; the poll at 510 activates
    guarded = KedaAutoscaler(_keda(activation_threshold=5.0), initial_replicas=0)
    assert _run(guarded, {0.0: 0.0, 500.0: 3.0}, until=600) == []  # 3 <= 5: stays at zero


def test_scrape_lag_delays_what_the_hpa_sees() -> None:
    """Default phase: scrapes at 7.5, 22.5, ... s, so the sync at 15 s reads the 7.5 s
    sample and a jump at 10 s is seen at the 30 s sync."""
    lagged = KedaAutoscaler(_keda(min_replicas=1, scrape_offset_s=None), initial_replicas=1)
    assert _run(lagged, {0.0: 5.0, 10.0: 50.0}, until=40)[0] == (30.0, 5)  # +4 pods: 1 -> 5
    prompt = KedaAutoscaler(_keda(min_replicas=1), initial_replicas=1)
    assert _run(prompt, {0.0: 5.0, 10.0: 50.0}, until=40)[0] == (15.0, 5)


def test_keda_scale_up_follows_hpa_policies_and_max() -> None:
    keda = KedaAutoscaler(_keda(min_replicas=1, behavior=Behavior()), initial_replicas=1)
    changes = _run(keda, {0.0: 100.0}, until=60)  # asks ceil(100 / 5) = 20, max 10
    assert changes == [(0.0, 5), (15.0, 10)]


# -- Prometheus queries ------------------------------------------------------------------------


def _scrape(values: dict[float, float], interval: float = 15.0) -> ScrapedSeries:
    s = ScrapedSeries(interval)
    for t, v in sorted(values.items()):
        s.offer(t, v)
    return s


def test_rate_over_a_counter_extrapolates_like_prometheus() -> None:
    counter = _scrape({t: 2.0 * t for t in range(0, 61, 15)})  # 2 requests/s
    assert Query("llm_request_total", "rate", 60).evaluate(counter, 60.0) == pytest.approx(2.0)
    # the seed's rate(...[10s]) with a 15 s scrape: never two samples in the window -> nothing
    assert Query("llm_request_total", "rate", 10).evaluate(counter, 60.0) == 0.0


def test_rate_survives_a_counter_reset() -> None:
    """A gateway restart resets its counter: 30, 60, then 10, 40 is an increase of 70."""
    counter = _scrape({0: 0.0, 15: 30.0, 30: 60.0, 45: 10.0, 60: 40.0})
    # window (0, 60]: 4 samples over 45 s, extrapolated by 15 s at the start: 70 / 45
    assert Query("llm_request_total", "rate", 60).evaluate(counter, 60.0) == pytest.approx(70 / 45)


def test_rate_over_a_gauge_is_wrong_and_refused() -> None:
    """The seed's sum(rate(llm_request_queue_depth[1m])): a queue stuck at 1000 reads 0."""
    stuck = _scrape({t: 1000.0 for t in range(0, 121, 15)})
    seed_query = Query("llm_request_queue_depth", "rate", 60, kind="counter")  # forced
    assert seed_query.evaluate(stuck, 120.0) == 0.0
    assert Query("llm_request_queue_depth", "max_over_time", 60).evaluate(stuck, 120.0) == 1000
    with pytest.raises(ValueError, match="counters only"):
        Query("llm_request_queue_depth", "rate", 60)


def test_promql_text() -> None:
    assert Query("llm_request_total", "rate", 60).promql() == "sum(rate(llm_request_total[1m]))"
    assert Query("llm_request_queue_depth").promql() == "sum(llm_request_queue_depth)"
    q = Query("llm_request_queue_depth", "max_over_time", 60)
    assert q.promql(15) == "max_over_time(sum(llm_request_queue_depth)[1m:15s])"
