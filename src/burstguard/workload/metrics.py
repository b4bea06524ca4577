"""Burstiness metrics of a workload: how far it is from the steady load a benchmark assumes.

Hurst exponent: the aggregated-variance estimator on 1 s request counts (Taqqu, Teverovsky
& Willinger 1995): Var(X^(m)) ~ m^(2H-2) for the series averaged over blocks of m, fitted by
least squares on a log-log grid of block sizes. H = 0.5 for short-range dependent (e.g.
Poisson) counts; H -> 1 for long-range dependent (self-similar) traffic.
Gamma shape: the closed-form maximum-likelihood approximation of Minka (2002) on the
inter-arrival gaps (fast on millions of gaps); where some gaps are zero (simultaneous
arrivals, or timestamps rounded to the trace's resolution) the likelihood is undefined, and
the moment estimate k = 1/CV^2 over all gaps, zeros included, is used instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from burstguard.workload.spec import Workload

WINDOWS_S = (1, 5, 10, 60)
BURSTY_PEAK_TO_AVERAGE = 5.0  # the field's rule of thumb, on 1 s or 5 s windows


def counts_per_window(arrival_s: np.ndarray, window_s: float) -> np.ndarray:
    """Request counts in consecutive windows from the first arrival to the last."""
    if arrival_s.size == 0:
        return np.zeros(0, dtype=np.int64)
    t = arrival_s - arrival_s[0]
    return np.bincount((t // window_s).astype(np.int64))


def peak_to_average(arrival_s: np.ndarray, window_s: float) -> float | None:
    counts = counts_per_window(arrival_s, window_s)
    if counts.size == 0 or counts.mean() == 0:
        return None
    return float(counts.max() / counts.mean())


def index_of_dispersion(arrival_s: np.ndarray, window_s: float = 1.0) -> float | None:
    """Variance / mean of counts per window (1 for Poisson)."""
    counts = counts_per_window(arrival_s, window_s)
    if counts.size < 2 or counts.mean() == 0:
        return None
    return float(counts.var() / counts.mean())


def hurst_aggregated_variance(counts: np.ndarray, min_blocks: int = 10) -> float | None:
    """Aggregated-variance Hurst estimate of a count series (see module docstring)."""
    x = np.asarray(counts, dtype=np.float64)
    if x.size < 100 or x.var() == 0:
        return None
    sizes = np.unique(np.logspace(0, np.log10(x.size / min_blocks), 20).astype(int))
    logs_m, logs_v = [], []
    for m in sizes:
        k = x.size // m
        blocks = x[: k * m].reshape(k, m).mean(axis=1)
        v = blocks.var()
        if v > 0:
            logs_m.append(np.log(m))
            logs_v.append(np.log(v))
    if len(logs_m) < 3:
        return None
    slope = np.polyfit(logs_m, logs_v, 1)[0]
    return float(1.0 + slope / 2.0)


ZERO_GAP_SHARE = 0.01
"""Above this share of zero gaps the ML fit gives way to moments; below it, a stray tie
(two arrivals in the same microsecond of a long trace) is left out of the ML fit."""


def gamma_fit_method(gaps: np.ndarray) -> str:
    """`ml` (Minka) on the positive gaps, or `moments` where zero gaps are more than a
    stray tie (see the module docstring)."""
    return "moments" if gaps.size and float((gaps <= 0).mean()) > ZERO_GAP_SHARE else "ml"


def gamma_shape(gaps: np.ndarray) -> float | None:
    """The Gamma shape k of the gaps: Minka's closed-form ML approximation, or 1/CV^2 when
    there are zero gaps. Dropping the zeros instead would read a burst pattern (mostly
    zero gaps inside each burst) as smoother than Poisson: the seed's bursts as k = 9.4."""
    g = np.asarray(gaps, dtype=np.float64)
    if g.size < 2 or g.mean() <= 0:
        return None
    if gamma_fit_method(g) == "moments":
        var = float(g.var())
        return float(g.mean()) ** 2 / var if var > 0 else None
    g = g[g > 0]
    if g.size < 2:
        return None
    s = float(np.log(g.mean()) - np.log(g).mean())
    if s <= 0:
        return None
    return (3 - s + np.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)


def token_stats(tokens: np.ndarray) -> dict[str, float | None]:
    if tokens.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(tokens, [50, 90, 99])
    return {
        "mean": float(tokens.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(tokens.max()),
    }


def per_second_series(workload: Workload) -> dict[str, list[float]]:
    """Requests, input tokens and output tokens per second from the first arrival."""
    t = workload.arrival_s
    if t.size == 0:
        return {"t": [], "requests": [], "input_tokens": [], "output_tokens": []}
    idx = (t - t[0]).astype(np.int64)
    n = int(idx.max()) + 1
    return {
        "t": np.arange(n, dtype=np.float64).tolist(),
        "requests": np.bincount(idx, minlength=n).tolist(),
        "input_tokens": np.bincount(idx, weights=workload.prompt_tokens, minlength=n).tolist(),
        "output_tokens": np.bincount(idx, weights=workload.output_tokens, minlength=n).tolist(),
    }


def analyze(workload: Workload) -> dict[str, Any]:
    """The `analyze --json` object (keys documented in docs/workload.md)."""
    t = workload.arrival_s
    n = len(workload)
    duration = float(t[-1] - t[0]) if n > 1 else 0.0
    gaps = np.diff(t)
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else None
    par = {f"{w}s": peak_to_average(t, w) for w in WINDOWS_S}
    short = [v for v in (par["1s"], par["5s"]) if v is not None]
    failed = int(workload.failed.sum()) if workload.failed is not None else 0
    return {
        "source": workload.source,
        "requests": n,
        "failed_requests": failed,
        "duration_s": duration,
        "mean_rate_rps": n / duration if duration > 0 else None,
        "peak_to_average": par,
        "interarrival_cv": cv,
        "index_of_dispersion_1s": index_of_dispersion(t, 1.0),
        "hurst": hurst_aggregated_variance(counts_per_window(t, 1.0)),
        "hurst_estimator": "aggregated-variance on 1 s counts",
        "gamma_shape": gamma_shape(gaps),
        "gamma_fit": gamma_fit_method(gaps),
        "zero_gaps": int((gaps == 0).sum()),
        "input_tokens": token_stats(workload.prompt_tokens),
        "output_tokens": token_stats(workload.output_tokens),
        "verdict": "bursty" if any(v > BURSTY_PEAK_TO_AVERAGE for v in short) else "smooth",
    }
