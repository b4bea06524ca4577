"""Arrival processes: seeded generators of absolute arrival times (seconds) over a duration.

Each documents its mean rate so that a steady and a bursty run can be matched at the same
mean load. All are vectorised with numpy, so a million arrivals cost no noticeable time
(docs/workload.md, "Speed").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from burstguard.workload.seed import BURST_SIZE, IDLE_S

Rng = np.random.Generator


def _renewal(gaps: Callable[[int], np.ndarray], mean_gap: float, duration_s: float) -> np.ndarray:
    """Cumulative sums of i.i.d. gaps, extended in chunks until the duration is covered."""
    expected = duration_s / mean_gap
    chunk = max(16, int(expected * 1.05 + 6 * np.sqrt(expected) + 16))
    parts: list[np.ndarray] = []
    offset = 0.0
    while offset < duration_s:
        times = offset + np.cumsum(gaps(chunk))
        parts.append(times)
        offset = float(times[-1])
    out = np.concatenate(parts)
    return out[out < duration_s]


def constant(rate: float, duration_s: float) -> np.ndarray:
    """Evenly spaced arrivals; mean rate = `rate`."""
    return np.arange(0.0, duration_s, 1.0 / rate)


def poisson(rate: float, duration_s: float, rng: Rng) -> np.ndarray:
    """Exponential gaps; mean rate = `rate`, inter-arrival CV = 1."""
    return gamma(rate, 1.0, duration_s, rng)


def gamma(rate: float, burstiness: float, duration_s: float, rng: Rng) -> np.ndarray:
    """Gamma gaps with vLLM's `--burstiness` semantics: shape k, scale 1/(rate*k).

    Mean rate = `rate`; CV = 1/sqrt(k); k = 1 is Poisson, k < 1 burstier.
    """
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    scale = 1.0 / (rate * burstiness)
    return _renewal(lambda n: rng.gamma(burstiness, scale, n), 1.0 / rate, duration_s)


def burst_idle_scale(
    rate: float, burst_size: tuple[int, int], idle_s: tuple[float, float]
) -> float:
    """The factor on the idle range that makes the seed pattern's mean rate equal `rate`."""
    mean_size = (burst_size[0] + burst_size[1]) / 2
    mean_idle = (idle_s[0] + idle_s[1]) / 2
    return mean_size / (rate * mean_idle)


def burst(
    duration_s: float,
    rng: Rng,
    burst_size: tuple[int, int] = BURST_SIZE,
    idle_s: tuple[float, float] = IDLE_S,
    spread_s: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seed script's pattern: a burst of uniformly `burst_size` near-simultaneous
    requests (spread uniformly over `spread_s`), then an idle gap uniform in `idle_s`.

    Mean rate = mean burst size / mean idle gap. Returns (arrivals, burst starts, sizes).
    """
    mean_cycle = (idle_s[0] + idle_s[1]) / 2
    n = int(duration_s / max(mean_cycle, 1e-9) * 1.2) + 8
    starts_parts: list[np.ndarray] = []
    offset = 0.0
    while offset < duration_s:
        gaps = rng.uniform(idle_s[0], idle_s[1], n)
        starts = offset + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        starts_parts.append(starts)
        offset = float(starts[-1] + gaps[-1])
    starts = np.concatenate(starts_parts)
    starts = starts[starts < duration_s]
    sizes = rng.integers(burst_size[0], burst_size[1] + 1, starts.size)
    times = np.repeat(starts, sizes)
    if spread_s > 0:
        times = times + rng.uniform(0.0, spread_s, times.size)
    times.sort()
    return times[times < duration_s], starts, sizes


def mmpp(
    duration_s: float,
    rng: Rng,
    rate_on: float,
    rate_off: float,
    mean_on_s: float,
    mean_off_s: float,
) -> np.ndarray:
    """Two-state Markov-modulated Poisson process (exponential sojourns, ON first).

    Mean rate = (rate_on*mean_on + rate_off*mean_off) / (mean_on + mean_off).
    """
    cycle = mean_on_s + mean_off_s
    n = int(duration_s / cycle * 1.5) + 8
    on = rng.exponential(mean_on_s, n)
    off = rng.exponential(mean_off_s, n)
    while on.sum() + off.sum() < duration_s:
        on = np.concatenate((on, rng.exponential(mean_on_s, n)))
        off = np.concatenate((off, rng.exponential(mean_off_s, n)))
    lengths = np.empty(on.size * 2)
    lengths[0::2], lengths[1::2] = on, off
    rates = np.tile([rate_on, rate_off], on.size)
    return _piecewise_poisson(lengths, rates, duration_s, rng)


def _piecewise_poisson(
    lengths: np.ndarray, rates: np.ndarray, duration_s: float, rng: Rng
) -> np.ndarray:
    """Poisson arrivals inside consecutive periods of given lengths and rates."""
    starts = np.concatenate(([0.0], np.cumsum(lengths)[:-1]))
    keep = starts < duration_s
    starts, lengths, rates = starts[keep], lengths[keep], rates[keep]
    counts = rng.poisson(rates * lengths)
    times = np.repeat(starts, counts) + rng.uniform(0, 1, counts.sum()) * np.repeat(lengths, counts)
    times.sort()
    return times[times < duration_s]


def pareto_on_off(
    rate: float,
    duration_s: float,
    rng: Rng,
    hurst: float = 0.8,
    sources: int = 32,
    mean_on_s: float = 1.0,
    mean_off_s: float = 1.0,
) -> np.ndarray:
    """Self-similar traffic: a superposition of `sources` ON/OFF sources whose ON and OFF
    periods are Pareto with tail index alpha = 3 - 2H (Taqqu et al.); an ON source emits
    Poisson arrivals. The superposition's counts are long-range dependent with Hurst H.

    Mean rate = `rate` (each source emits rate/sources * (on+off)/on while ON).
    """
    if not 0.5 < hurst < 1.0:
        raise ValueError("hurst must be in (0.5, 1)")
    alpha = 3.0 - 2.0 * hurst
    on_rate = rate / sources * (mean_on_s + mean_off_s) / mean_on_s
    parts: list[np.ndarray] = []
    for _ in range(sources):
        n = int(duration_s / (mean_on_s + mean_off_s) * 2) + 16
        # Pareto with minimum xm has mean xm*alpha/(alpha-1).
        on = (rng.pareto(alpha, n) + 1) * mean_on_s * (alpha - 1) / alpha
        off = (rng.pareto(alpha, n) + 1) * mean_off_s * (alpha - 1) / alpha
        lengths = np.empty(2 * n)
        lengths[0::2], lengths[1::2] = on, off
        phase = rng.uniform(0, lengths[:2].sum())  # random phase: start mid-cycle
        lengths = np.concatenate(([max(lengths[0] - phase, 0.0)], lengths[1:]))
        rates = np.tile([on_rate, 0.0], n)
        parts.append(_piecewise_poisson(lengths, rates, duration_s, rng))
    out = np.concatenate(parts)
    out.sort()
    return out


def envelope_factor(
    kind: str, t: np.ndarray, duration_s: float, params: dict[str, float]
) -> np.ndarray:
    """A rate multiplier over time, mean ~1 over the run for ramp and sine.

    ramp: from `start` to `end` (default 0.2 -> 1.8); step: `low` before `at_s`, `high` after;
    diurnal: 1 + amplitude*sin(2*pi*t/period_s).
    """
    if kind == "ramp":
        start, end = params.get("start", 0.2), params.get("end", 1.8)
        return start + (end - start) * t / duration_s
    if kind == "step":
        at = params.get("at_s", duration_s / 2)
        return np.where(t < at, params.get("low", 0.5), params.get("high", 1.5))
    if kind == "diurnal":
        amp = params.get("amplitude", 0.8)
        period = params.get("period_s", duration_s)
        return 1.0 + amp * np.sin(2 * np.pi * t / period)
    raise ValueError(f"unknown envelope {kind!r}: use ramp, step or diurnal")


def apply_envelope(
    arrivals_at: Callable[[float], np.ndarray],
    kind: str,
    duration_s: float,
    params: dict[str, float],
    rng: Rng,
) -> np.ndarray:
    """Wraps any process in a time-varying rate envelope by thinning: the base process is
    generated at `peak` x its rate and each arrival kept with probability factor(t)/peak.
    `arrivals_at(multiplier)` must return the base process at multiplier x its mean rate.
    Mean rate = base mean rate x the envelope's mean factor."""
    grid = np.linspace(0, duration_s, 1001)
    peak = float(np.max(envelope_factor(kind, grid, duration_s, params)))
    if peak <= 0:
        raise ValueError("envelope is never positive")
    base = arrivals_at(peak)
    keep = rng.uniform(0, peak, base.size) < envelope_factor(kind, base, duration_s, params)
    return base[keep]
