"""Steady vs burst: the seed's validation rules as a pure verdict over two run summaries.

The rules (seed article, sections 6-7): burst P95 TTFT at most 2x the steady leg's (5x or
more is a serious problem); TPOT and ITL stay stable (ITL also in its spread: the burst's
p99/p50 against the steady leg's); SLO attainment stays >= 95%; the engine's queue drains
after each burst instead of accumulating; retries do not multiply the load; KV usage and
preemptions stay under their limits where given. A leg whose schedule lag shows that the
client, not the server, was late is no measurement at all: the verdict is invalid.
`compare_baseline` is the release-to-release gate: a new run's burst leg against an old
one's, within tolerances. No I/O and no printing here, so the CLI, the scenario runner,
the demo and CI gates share one verdict.
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
PREEMPTION_METRICS = ("vllm:num_preemptions_total",)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Limits of the verdict; the defaults are the seed's."""

    max_ttft_p95_ratio: float = 2.0
    serious_ttft_p95_ratio: float = 5.0
    max_tpot_p95_ratio: float = 1.5
    max_itl_p95_ratio: float = 1.5
    min_slo: float = 0.95
    max_drain_s: float | None = None  # None: the queue must drain, however long it takes
    max_itl_jitter_ratio: float = 2.0  # burst ITL p99/p50 over the steady leg's
    max_retry_amplification: float = 1.2  # burst attempts per request
    max_kv_peak: float | None = None  # None: reported, not gated
    max_preemptions: int | None = None  # None: reported, not gated
    max_schedule_lag_s: float = 1.0  # p99 lag (target seconds) beyond which a leg is invalid

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
        if self.max_itl_jitter_ratio <= 0 or self.max_schedule_lag_s <= 0:
            raise ValueError("max_itl_jitter_ratio and max_schedule_lag_s must be > 0")
        if self.max_retry_amplification < 1:
            raise ValueError("max_retry_amplification must be >= 1 (1 = no retries)")
        if self.max_kv_peak is not None and not 0 < self.max_kv_peak <= 1:
            raise ValueError("max_kv_peak must be in (0, 1]")
        if self.max_preemptions is not None and self.max_preemptions < 0:
            raise ValueError("max_preemptions must be >= 0")


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
    """The checks, and why the legs cannot be judged at all (`invalid`, empty when they
    can). `kind`: steady-vs-burst, or baseline (then `steady` columns hold the baseline
    run's figures and `burst` columns the new run's)."""

    checks: list[Check]
    thresholds: Thresholds | Tolerances
    legs: dict[str, str] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)
    kind: str = "steady-vs-burst"

    @property
    def valid(self) -> bool:
        return not self.invalid

    @property
    def passed(self) -> bool:
        return self.valid and all(c.status not in ("fail", "serious") for c in self.checks)

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
            "kind": self.kind,
            "passed": self.passed,
            "valid": self.valid,
            "invalid": self.invalid,
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


def kv_peak(summary: dict[str, Any]) -> float | None:
    """The highest KV cache usage scraped (or simulated) in a run; None when not recorded."""
    col = server_column(summary, KV_METRICS)
    if col is None or col.size == 0 or np.all(np.isnan(col)):
        return None
    return float(np.nanmax(col))


def preemptions(summary: dict[str, Any]) -> float | None:
    """Preemptions during a run: the sim's own count, else the increase of the scraped
    `vllm:num_preemptions_total` counter; None when neither was recorded."""
    value = summary.get("preemptions")
    if isinstance(value, int | float):
        return float(value)
    col = server_column(summary, PREEMPTION_METRICS)
    if col is None or col.size == 0 or np.all(np.isnan(col)):
        return None
    return float(np.nanmax(col) - np.nanmin(col))


def attempts_per_request(summary: dict[str, Any]) -> float | None:
    requests = summary.get("requests")
    if not isinstance(requests, int) or requests == 0:
        return None
    attempts = summary.get("attempts")
    if not isinstance(attempts, int):
        attempts = requests + int(summary.get("retries") or 0)
    return attempts / requests


def _limit_check(
    name: str,
    label: str,
    steady: float | None,
    burst: float | None,
    limit: float | None,
    fmt: str,
) -> Check:
    """Burst figure against an upper limit; reported only (info) when the limit is None."""
    if burst is None:
        return Check(name, label, steady, None, None, "", "n/a", "not recorded")
    if limit is None:
        return Check(name, label, steady, burst, burst, "", "info", "no limit set")
    status: Status = "pass" if burst <= limit else "fail"
    return Check(name, label, steady, burst, burst, f"<= {limit:{fmt}}", status)


def _kv_peak(steady: dict[str, Any], burst: dict[str, Any], th: Thresholds) -> Check:
    check = _limit_check("kv_peak", "KV cache peak usage", kv_peak(steady), kv_peak(burst),
                         th.max_kv_peak, ".0%")  # fmt: skip
    if check.burst is not None and check.burst >= 0.99 and check.status != "fail":
        note = "full: the engine preempts or stalls"
        return Check(**{**asdict(check), "note": note})
    return check


def _jitter(summary: dict[str, Any]) -> float | None:
    """ITL p99 over its mean: the mean, not the p50, since tokens that reach the client in
    one read have zero gaps, and a p50 of zero makes the ratio meaningless."""
    block = summary.get("itl_s")
    if not isinstance(block, dict) or not block.get("mean") or block.get("p99") is None:
        return None
    return float(block["p99"]) / float(block["mean"])


def _jitter_check(steady: dict[str, Any], burst: dict[str, Any], th: Thresholds) -> Check:
    """ITL jitter (p99/mean) of the burst leg over the steady leg's: a stall in the token
    stream (a long prefill in the batch, a preemption) shows in the spread before the p95."""
    name, label = "itl_jitter_ratio", "ITL jitter (p99/mean) burst/steady"
    s, b = _jitter(steady), _jitter(burst)
    if s is None or b is None:
        limit = f"<= {th.max_itl_jitter_ratio:g}x"
        return Check(name, label, s, b, None, limit, "n/a", "no ITL in a leg (not streamed)")
    return _ratio_check(name, label, s, b, th.max_itl_jitter_ratio)


def schedule_lag_problems(legs: dict[str, dict[str, Any]], limit_s: float) -> list[str]:
    """Why a leg cannot be judged: its p99 schedule lag (client late against its own
    schedule) over `limit_s`, so the server was offered less, later, than intended."""
    out = []
    for name, summary in legs.items():
        block = summary.get("schedule_lag_s")
        lag = block.get("p99") if isinstance(block, dict) else None
        if isinstance(lag, int | float) and lag > limit_s:
            out.append(
                f"{name} leg: schedule lag p99 {lag:.3f} s > {limit_s:g} s: the client was "
                "the bottleneck (sent late), not the server; rerun with a lower rate or "
                "--speedup, or on a less loaded machine"
            )
    return out


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
        _jitter_check(steady, burst, th),
        _slo_check("slo_steady", "SLO attainment, steady", steady.get("slo_attainment"), th),
        _slo_check("slo_burst", "SLO attainment, burst", burst.get("slo_attainment"), th),
        _drain_check(steady, burst, th),
        _limit_check("retry_amplification", "attempts per request",
                     attempts_per_request(steady), attempts_per_request(burst),
                     th.max_retry_amplification, "g"),
        _kv_peak(steady, burst, th),
        _limit_check("preemptions", "preemptions", preemptions(steady), preemptions(burst),
                     th.max_preemptions, "g"),
        _rate_check(steady, burst),
    ]  # fmt: skip
    invalid = schedule_lag_problems({"steady": steady, "burst": burst}, th.max_schedule_lag_s)
    return Verdict(checks=checks, thresholds=th, legs=dict(legs or {}), invalid=invalid)


@dataclass(frozen=True, slots=True)
class Tolerances:
    """How much worse a new release's burst leg may be than its baseline's: `latency` as a
    fraction of the baseline's P95 TTFT/TPOT/ITL/E2E and of its throughput, `slo` in
    points of attainment, `drain_s` seconds of extra queue drain, `preemptions` extra."""

    latency: float = 0.10
    slo: float = 0.02
    drain_s: float = 1.0
    preemptions: float = 0.0
    max_schedule_lag_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("latency", "slo", "drain_s", "preemptions"):
            if getattr(self, name) < 0:
                raise ValueError(f"tolerance {name} must be >= 0")
        if self.max_schedule_lag_s <= 0:
            raise ValueError("max_schedule_lag_s must be > 0")


def _worse(
    name: str,
    label: str,
    old: float | None,
    new: float | None,
    allowed: float | None,
    limit: str,
    higher_is_worse: bool = True,
) -> Check:
    if old is None and new is None:
        return Check(name, label, None, None, None, limit, "n/a", "in neither run")
    if old is None or new is None:
        which = "baseline" if old is None else "new run"
        return Check(name, label, old, new, None, limit, "n/a", f"not in the {which}")
    assert allowed is not None
    ok = new <= allowed if higher_is_worse else new >= allowed
    return Check(name, label, old, new, new, limit, "pass" if ok else "fail")


def _worst_drain(summary: dict[str, Any]) -> float | None:
    waiting = server_column(summary, QUEUE_METRICS)
    if waiting is None:
        return None
    t = np.asarray(summary["server_series"]["t"], dtype=np.float64)
    return max(queue_drain(t, np.nan_to_num(waiting), 0.0).drain_s, default=0.0)


def compare_baseline(
    old: dict[str, Any],
    new: dict[str, Any],
    tolerances: Tolerances | None = None,
    legs: dict[str, str] | None = None,
) -> Verdict:
    """The release gate: the new burst leg may be at most `tolerances` worse than the
    baseline's on P95 TTFT, TPOT, ITL and E2E, throughput, SLO attainment, queue drain
    and preemptions."""
    tol = tolerances or Tolerances()
    up = 1 + tol.latency
    checks = []
    for key, label in (("ttft_s", "P95 TTFT"), ("tpot_s", "P95 TPOT"), ("itl_s", "P95 ITL"),
                       ("e2e_s", "P95 E2E")):  # fmt: skip
        o, n = _p95(old, key), _p95(new, key)
        checks.append(_worse(f"{key[:-2]}_p95_regression", label, o, n,
                             None if o is None else o * up, f"<= {up:g}x baseline"))  # fmt: skip
    o, n = old.get("output_tokens_per_s"), new.get("output_tokens_per_s")
    checks.append(_worse("throughput_regression", "output tokens/s", o, n,
                         None if o is None else o * (1 - tol.latency),
                         f">= {1 - tol.latency:g}x baseline", higher_is_worse=False))  # fmt: skip
    o, n = old.get("slo_attainment"), new.get("slo_attainment")
    checks.append(_worse("slo_regression", "SLO attainment", o, n,
                         None if o is None else o - tol.slo, f">= baseline - {tol.slo:g}",
                         higher_is_worse=False))  # fmt: skip
    o, n = _worst_drain(old), _worst_drain(new)
    checks.append(_worse("drain_regression", "worst queue drain", o, n,
                         None if o is None else o + tol.drain_s,
                         f"<= baseline + {tol.drain_s:g} s"))  # fmt: skip
    o, n = preemptions(old), preemptions(new)
    checks.append(_worse("preemptions_regression", "preemptions", o, n,
                         None if o is None else o + tol.preemptions,
                         f"<= baseline + {tol.preemptions:g}"))  # fmt: skip
    invalid = schedule_lag_problems({"baseline": old, "new": new}, tol.max_schedule_lag_s)
    return Verdict(checks=checks, thresholds=tol, legs=dict(legs or {}), invalid=invalid,
                   kind="baseline")  # fmt: skip
