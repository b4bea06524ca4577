"""Steady vs burst: the seed's validation rules as a pure verdict over two run summaries.

The rules (seed article, sections 6-7): burst P95 TTFT at most 2x the steady leg's (5x or
more is a serious problem); TPOT and ITL stay stable; SLO attainment stays >= 95%; the
engine's queue drains after each burst instead of accumulating. No I/O and no printing
here, so the CLI, the scenario runner, the demo and CI gates share one verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

COMPARE_SCHEMA = "burstguard.compare/1"

Status = Literal["pass", "fail", "serious", "n/a", "info"]

# Scraped series columns (bench `--scrape-metrics`): matched by the metric's name, so that
# label sets (`{model_name="..."}`) and the gateway's queue metric all count.
QUEUE_METRICS = ("vllm:num_requests_waiting", "llm_request_queue_depth")
KV_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Limits of the verdict; the defaults are the seed's."""

    max_ttft_p95_ratio: float = 2.0
    serious_ttft_p95_ratio: float = 5.0
    max_tpot_p95_ratio: float = 1.5
    max_itl_p95_ratio: float = 1.5
    min_slo: float = 0.95
    max_drain_s: float | None = None  # None: the queue must drain, however long it takes

    def __post_init__(self) -> None:
        for name in ("max_ttft_p95_ratio", "max_tpot_p95_ratio", "max_itl_p95_ratio"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.serious_ttft_p95_ratio < self.max_ttft_p95_ratio:
            raise ValueError("serious_ttft_p95_ratio must be >= max_ttft_p95_ratio")
        if not 0 <= self.min_slo <= 1:
            raise ValueError("min_slo must be between 0 and 1")
        if self.max_drain_s is not None and self.max_drain_s <= 0:
            raise ValueError("max_drain_s must be > 0")


@dataclass(frozen=True, slots=True)
class Check:
    """One row of the verdict. `value` is what the limit applies to (a ratio, a fraction or
    seconds); `steady` and `burst` are the legs' own figures behind it."""

    name: str
    label: str
    steady: float | None
    burst: float | None
    value: float | None
    limit: str
    status: Status
    note: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    checks: list[Check]
    thresholds: Thresholds
    legs: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.status not in ("fail", "serious") for c in self.checks)

    @property
    def serious(self) -> bool:
        return any(c.status == "serious" for c in self.checks)

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": COMPARE_SCHEMA,
            "passed": self.passed,
            "serious": self.serious,
            "legs": self.legs,
            "thresholds": asdict(self.thresholds),
            "checks": [asdict(c) for c in self.checks],
        }


def _p95(summary: dict[str, Any], key: str) -> float | None:
    block = summary.get(key)
    value = block.get("p95") if isinstance(block, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _ratio_check(
    name: str, label: str, steady: float | None, burst: float | None, limit: float
) -> Check:
    text = f"<= {limit:g}x"
    if steady is None and burst is None:
        return Check(name, label, None, None, None, text, "n/a", "not measured in either leg")
    if steady is None or burst is None:
        missing = "steady" if steady is None else "burst"
        return Check(name, label, steady, burst, None, text, "fail", f"no {missing} value")
    if steady <= 0:
        return Check(name, label, steady, burst, None, text, "fail", "steady value is 0")
    ratio = burst / steady
    return Check(name, label, steady, burst, ratio, text, "pass" if ratio <= limit else "fail")


def _ttft_check(steady: dict[str, Any], burst: dict[str, Any], th: Thresholds) -> Check:
    check = _ratio_check(
        "ttft_p95_ratio",
        "P95 TTFT burst/steady",
        _p95(steady, "ttft_s"),
        _p95(burst, "ttft_s"),
        th.max_ttft_p95_ratio,
    )
    if check.value is not None and check.value >= th.serious_ttft_p95_ratio:
        note = f">= {th.serious_ttft_p95_ratio:g}x: serious, fix scheduling or scaling"
        return Check(**{**asdict(check), "status": "serious", "note": note})
    return check


def _slo_check(name: str, label: str, value: Any, th: Thresholds) -> Check:
    text = f">= {th.min_slo:.0%}"
    if not isinstance(value, int | float):
        return Check(name, label, None, None, None, text, "fail", "no requests in this leg")
    status: Status = "pass" if value >= th.min_slo else "fail"
    steady = float(value) if name == "slo_steady" else None
    burst = float(value) if name == "slo_burst" else None
    return Check(name, label, steady, burst, float(value), text, status)


def server_column(summary: dict[str, Any], metrics: tuple[str, ...]) -> np.ndarray | None:
    """The scraped series of the first of `metrics` present (summed over label sets), or
    None when the run scraped none of them. `server_series` is columnar: `t` plus one list
    per sample name (see docs/formats.md)."""
    series = summary.get("server_series")
    if not isinstance(series, dict) or not series.get("t"):
        return None
    for metric in metrics:
        cols = [
            np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
            for key, values in series.items()
            if key == metric or key.startswith(metric + "{")
        ]
        if cols:
            return np.nansum(np.vstack(cols), axis=0)
    return None


@dataclass(frozen=True, slots=True)
class Drain:
    """Queue episodes of one run: each is a rise above `level` from its peak to its return."""

    level: float
    peak: float
    drain_s: list[float]
    undrained: bool  # the last episode was still above `level` when scraping stopped


def queue_drain(t: np.ndarray, waiting: np.ndarray, level: float) -> Drain:
    """Splits the waiting-queue series into episodes above `level` and measures, for each,
    the time from its peak to the first sample back at or below `level`."""
    drains: list[float] = []
    above = waiting > level
    i, n = 0, len(waiting)
    undrained = False
    while i < n:
        if not above[i]:
            i += 1
            continue
        j = i
        while j < n and above[j]:
            j += 1
        peak_at = i + int(np.argmax(waiting[i:j]))
        if j == n:
            undrained = True
            drains.append(float(t[-1] - t[peak_at]))
        else:
            drains.append(float(t[j] - t[peak_at]))
        i = j
    peak = float(np.nanmax(waiting)) if n else 0.0
    return Drain(level=level, peak=peak, drain_s=drains, undrained=undrained)


def _drain_check(steady: dict[str, Any], burst: dict[str, Any], th: Thresholds) -> Check:
    limit = "drains" if th.max_drain_s is None else f"drains in <= {th.max_drain_s:g} s"
    label = "queue drain after bursts"
    waiting = server_column(burst, QUEUE_METRICS)
    if waiting is None:
        return Check("queue_drain", label, None, None, None, limit, "n/a", "queue not scraped")
    t = np.asarray(burst["server_series"]["t"], dtype=np.float64)
    steady_waiting = server_column(steady, QUEUE_METRICS)
    # Drained means back to the steady leg's usual queue (its p95), or empty without one.
    level = float(np.nanpercentile(steady_waiting, 95)) if steady_waiting is not None else 0.0
    drain = queue_drain(t, waiting, level)
    worst = max(drain.drain_s, default=0.0)
    steady_peak = float(np.nanmax(steady_waiting)) if steady_waiting is not None else None
    note = f"{len(drain.drain_s)} episodes, burst peak {drain.peak:.0f} waiting"
    if drain.undrained:
        return Check(
            "queue_drain",
            label,
            steady_peak,
            drain.peak,
            worst,
            limit,
            "fail",
            f"{note}; still queued when the run ended (accumulating)",
        )
    ok = th.max_drain_s is None or worst <= th.max_drain_s
    return Check(
        "queue_drain", label, steady_peak, drain.peak, worst, limit, "pass" if ok else "fail", note
    )


def _kv_peak(steady: dict[str, Any], burst: dict[str, Any]) -> Check:
    legs = [server_column(s, KV_METRICS) for s in (steady, burst)]
    peaks = [float(np.nanmax(col)) if col is not None and col.size else None for col in legs]
    before, peak = peaks
    if peak is None:
        return Check("kv_peak", "KV cache peak usage", before, None, None, "", "n/a", "not scraped")
    note = "full: the engine preempts or stalls" if peak >= 0.99 else ""
    return Check("kv_peak", "KV cache peak usage", before, peak, peak, "", "info", note)


def _rate_check(steady: dict[str, Any], burst: dict[str, Any]) -> Check:
    """Both legs should carry the same mean load, or the TTFT ratio compares apples to pears."""
    s, b = steady.get("achieved_rate_rps"), burst.get("offered_rate_rps")
    if not isinstance(s, int | float) or not isinstance(b, int | float) or s <= 0:
        return Check("rate_ratio", "mean rate burst/steady", None, None, None, "", "n/a")
    ratio = b / s
    note = "" if abs(ratio - 1) <= 0.15 else "legs not at the same mean rate"
    return Check("rate_ratio", "mean rate burst/steady", s, b, ratio, "~1x", "info", note)


def compare(
    steady: dict[str, Any],
    burst: dict[str, Any],
    thresholds: Thresholds | None = None,
    legs: dict[str, str] | None = None,
) -> Verdict:
    """The verdict of a burst leg against its steady baseline (both `burstguard.summary/1`)."""
    th = thresholds or Thresholds()
    checks = [
        _ttft_check(steady, burst, th),
        _ratio_check(
            "tpot_p95_ratio",
            "P95 TPOT burst/steady",
            _p95(steady, "tpot_s"),
            _p95(burst, "tpot_s"),
            th.max_tpot_p95_ratio,
        ),
        _ratio_check(
            "itl_p95_ratio",
            "P95 ITL burst/steady",
            _p95(steady, "itl_s"),
            _p95(burst, "itl_s"),
            th.max_itl_p95_ratio,
        ),
        _slo_check("slo_steady", "SLO attainment, steady", steady.get("slo_attainment"), th),
        _slo_check("slo_burst", "SLO attainment, burst", burst.get("slo_attainment"), th),
        _drain_check(steady, burst, th),
        _kv_peak(steady, burst),
        _rate_check(steady, burst),
    ]
    return Verdict(checks=checks, thresholds=th, legs=dict(legs or {}))
