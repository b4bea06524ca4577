"""Arrival generators: documented mean rates, gamma CV, seed pattern ranges, Hurst."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from burstguard.errors import BurstguardError
from burstguard.workload import arrivals
from burstguard.workload.metrics import counts_per_window, hurst_aggregated_variance
from burstguard.workload.synth import PATTERNS, PatternSpec, mean_rate, synthesize


@pytest.mark.parametrize("k", [0.25, 1.0, 4.0])
def test_gamma_cv_matches_burstiness(k: float) -> None:
    rng = np.random.default_rng(7)
    times = arrivals.gamma(5.0, k, 20_000 / 5.0 * 1.2, rng)[:20_000]
    gaps = np.diff(times)
    cv = gaps.std() / gaps.mean()
    assert times.size == 20_000
    assert cv == pytest.approx(1 / np.sqrt(k), rel=0.05)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_generator_meets_its_mean_rate(pattern: str) -> None:
    spec = PatternSpec(pattern=pattern, duration_s=40_000, rate=3.0, seed=11)
    workload = synthesize(spec)
    assert len(workload) / spec.duration_s == pytest.approx(mean_rate(spec), rel=0.03)
    assert np.all(np.diff(workload.arrival_s) >= 0)


def test_burst_pattern_sizes_and_gaps_in_range() -> None:
    rng = np.random.default_rng(3)
    times, starts, sizes = arrivals.burst(3600, rng, (15, 30), (5.0, 15.0))
    assert sizes.min() >= 15 and sizes.max() <= 30
    gaps = np.diff(starts)
    assert gaps.min() >= 5.0 and gaps.max() <= 15.0
    assert times.size == sizes[: starts.size].sum() or times.size <= sizes.sum()


def test_burst_rate_scales_idle_to_match_mean() -> None:
    spec = PatternSpec(pattern="burst", duration_s=50_000, rate=8.0, seed=2)
    assert len(synthesize(spec)) / spec.duration_s == pytest.approx(8.0, rel=0.03)


def test_envelope_wraps_a_process() -> None:
    spec = PatternSpec(pattern="poisson", duration_s=10_000, rate=4.0, envelope="ramp", seed=5)
    t = synthesize(spec).arrival_s
    first, last = (t < 2_000).sum(), (t > 8_000).sum()
    assert last > 3 * first  # the ramp goes 0.2 -> 1.8


def test_hurst_is_half_for_poisson_counts() -> None:
    rng = np.random.default_rng(1)
    counts = counts_per_window(arrivals.poisson(10.0, 20_000, rng), 1.0)
    assert hurst_aggregated_variance(counts) == pytest.approx(0.5, abs=0.1)


def test_hurst_detects_pareto_on_off_source() -> None:
    rng = np.random.default_rng(4)
    t = arrivals.pareto_on_off(10.0, 50_000, rng, hurst=0.8, sources=16)
    assert hurst_aggregated_variance(counts_per_window(t, 1.0)) == pytest.approx(0.8, abs=0.1)


def test_same_seed_same_workload() -> None:
    spec = PatternSpec(pattern="mmpp", duration_s=100, rate=2.0, seed=9, classes="a=0.5,b=0.5")
    a, b = synthesize(spec), synthesize(spec)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert list(a.priority_class) == list(b.priority_class)


def test_class_output_tokens_override_one_class_only() -> None:
    base = PatternSpec(pattern="poisson", duration_s=200, rate=5.0, seed=3, output_tokens="128",
                       classes="interactive=0.7,batch=0.3")  # fmt: skip
    spec = dataclasses.replace(base, class_output_tokens=(("batch", "uniform:512-1024"),))
    plain, mixed = synthesize(base), synthesize(spec)
    assert np.array_equal(plain.arrival_s, mixed.arrival_s)
    assert list(plain.priority_class) == list(mixed.priority_class)
    batch = mixed.priority_class == "batch"
    assert 0.2 < batch.mean() < 0.4
    assert (mixed.output_tokens[~batch] == 128).all()
    assert mixed.output_tokens[batch].min() >= 512 and mixed.output_tokens[batch].max() <= 1024
    assert (plain.output_tokens == 128).all()  # no override: the workload is unchanged


def test_class_output_tokens_refuses_unknown_class_and_missing_mix() -> None:
    with pytest.raises(BurstguardError, match="not in --classes"):
        synthesize(PatternSpec(classes="a=1", class_output_tokens=(("b", "64"),)))
    with pytest.raises(BurstguardError, match="needs --classes"):
        synthesize(PatternSpec(class_output_tokens=(("b", "64"),)))


def test_gamma_fit_reads_the_seed_bursts_as_burstier_than_poisson() -> None:
    """The seed pattern's gaps are mostly zero (a burst arrives at once): a fit that drops
    them saw only the idle gaps and called it smoother than Poisson (k ~ 10)."""
    from burstguard.workload.metrics import gamma_fit_method, gamma_shape

    rng = np.random.default_rng(3)
    seed = np.diff(arrivals.burst(600.0, rng)[0])
    assert gamma_fit_method(seed) == "moments"
    k = gamma_shape(seed)
    assert k is not None and k < 0.2
    poisson = np.diff(arrivals.poisson(5.0, 2000.0, rng))
    assert gamma_fit_method(poisson) == "ml"
    assert gamma_shape(poisson) == pytest.approx(1.0, abs=0.05)
    ties = np.concatenate([np.diff(arrivals.gamma(5.0, 0.25, 2000.0, rng)), [0.0]])
    assert gamma_shape(ties) == pytest.approx(0.25, abs=0.03)  # one stray tie changes nothing
