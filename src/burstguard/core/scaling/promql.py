"""The Prometheus side of a KEDA trigger: scraped samples and the few queries that matter.

Prometheus sees a metric only at scrape times, and a query sees only what was scraped:
that is the scrape lag a reactive autoscaler lives with. `ScrapedSeries` keeps the samples
of one metric's total (the sum over its label sets); `Query` evaluates one of the
functions below over them exactly as Prometheus does (range selectors are left-open,
`rate()` extrapolates like Prometheus' `extrapolatedRate`), and renders the PromQL text
that the exported ScaledObject carries, so the model and the manifest cannot disagree.
Gauges over time are subqueries of the sum (`max_over_time(sum(m)[1m:15s])`), evaluated
as Prometheus does: the sum's instant value at each multiple of the step. The model sums
counters before `rate()`; Prometheus sums the per-series rates: the same unless a single
series resets (a gateway restart), which the model cannot see inside the sum.

Which function fits which metric kind is the point of this module: `rate()` is defined
for counters only. The seed's `sum(rate(llm_request_queue_depth[1m]))` applies it to a
gauge; every fall of the queue reads as a counter reset, so the result is not the queue,
not its change, and grows with noise (see docs/autoscaling.md).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import ConfigDict

__all__ = ["METRIC_KINDS", "Function", "Query", "ScrapedSeries"]

Function = Literal["last", "max_over_time", "avg_over_time", "rate", "deriv"]
MetricKind = Literal["gauge", "counter"]

LOOKBACK_S = 300.0  # Prometheus' default lookback delta for an instant vector
_COUNTER_ONLY = {"rate"}
_GAUGE_ONLY = {"max_over_time", "avg_over_time", "deriv"}

METRIC_KINDS: dict[str, MetricKind] = {
    "llm_request_queue_depth": "gauge",  # gateway queue (per class)
    "burstguard_in_flight_requests": "gauge",
    "burstguard_desired_replicas": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_running": "gauge",
    "llm_request_total": "counter",  # gateway: requests by class and final outcome
    "burstguard_arrivals_total": "counter",  # gateway: requests as they arrive
}
"""Metrics the gateway and vLLM export, by kind. Other names must state their kind."""


class ScrapedSeries:
    """Samples of one metric taken every `interval_s` (Prometheus' scrape), kept `keep_s`."""

    def __init__(
        self, interval_s: float, keep_s: float = 3600.0, first_at: float = -math.inf
    ) -> None:
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.next_scrape_at = first_at  # -inf: the first offer scrapes
        self._t: deque[float] = deque()
        self._v: deque[float] = deque()

    def offer(self, now: float, value: float) -> None:
        """The metric's value at `now`; kept only if a scrape is due."""
        if now < self.next_scrape_at:
            return
        self._t.append(now)
        self._v.append(value)
        base = self.next_scrape_at if math.isfinite(self.next_scrape_at) else now
        # the next scrape on the grid, even if this one was taken late
        self.next_scrape_at = base + self.interval_s * (
            math.floor((now - base) / self.interval_s) + 1
        )
        while self._t and self._t[0] < now - self.keep_s:
            self._t.popleft()
            self._v.popleft()

    def window(self, start_excl: float, end: float) -> tuple[list[float], list[float]]:
        ts = list(self._t)
        lo = bisect.bisect_right(ts, start_excl)
        hi = bisect.bisect_right(ts, end)
        vs = list(self._v)
        return ts[lo:hi], vs[lo:hi]


@dataclass(frozen=True, slots=True)
class Query:
    """`sum(...)` of one metric through one function; window only for range functions."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    metric: str
    function: Function = "last"
    window_s: float = 60.0
    kind: MetricKind | None = None  # None: from METRIC_KINDS

    def __post_init__(self) -> None:
        kind = self.metric_kind
        if self.function in _COUNTER_ONLY and kind != "counter":
            raise ValueError(
                f"{self.function}() over {self.metric} (a {kind}): rate() is for counters only; "
                f"a gauge's every fall reads as a counter reset. Use last, max_over_time, "
                f"avg_over_time or deriv"
            )
        if self.function in _GAUGE_ONLY and kind != "gauge":
            raise ValueError(f"{self.function}() over the counter {self.metric}: use rate()")
        if self.function == "last" and kind != "gauge":
            raise ValueError(f"the raw value of the counter {self.metric} only grows: use rate()")
        if self.function != "last" and self.window_s <= 0:
            raise ValueError("window_s must be > 0")

    @property
    def metric_kind(self) -> MetricKind:
        if self.kind is not None:
            return self.kind
        if self.metric not in METRIC_KINDS:
            raise ValueError(
                f"unknown metric {self.metric!r}: say whether it is a gauge or a counter (kind)"
            )
        return METRIC_KINDS[self.metric]

    def promql(self, scrape_interval_s: float = 15.0) -> str:
        """The query text; gauges over time use a subquery of the sum (one series)."""
        w = _duration(self.window_s)
        if self.function == "last":
            return f"sum({self.metric})"
        if self.function == "rate":
            return f"sum(rate({self.metric}[{w}]))"
        return f"{self.function}(sum({self.metric})[{w}:{_duration(scrape_interval_s)}])"

    def evaluate(self, series: ScrapedSeries, now: float) -> float:
        """The query's value at `now`; no data reads as 0, as KEDA's ignoreNullValues does."""
        if self.function == "last":
            return _instant(series, now) or 0.0
        if self.function == "rate":  # over the raw samples of the counter
            ts, vs = series.window(now - self.window_s, now)
            return _extrapolated_rate(ts, vs, now - self.window_s, now) if len(vs) > 1 else 0.0
        ts, vs = _subquery(series, now - self.window_s, now)
        if not vs:
            return 0.0
        if self.function == "max_over_time":
            return max(vs)
        if self.function == "avg_over_time":
            return sum(vs) / len(vs)
        return _slope(ts, vs) if len(vs) > 1 else 0.0  # deriv() needs two points


def _instant(series: ScrapedSeries, at: float) -> float | None:
    """An instant vector at `at`: the newest sample within the lookback, if any."""
    _, vs = series.window(at - LOOKBACK_S, at)
    return vs[-1] if vs else None


def _subquery(
    series: ScrapedSeries, start_excl: float, end: float
) -> tuple[list[float], list[float]]:
    """`sum(...)[w:step]`: the instant value at each multiple of the step in the range (a
    series that stopped being scraped keeps its last value for the lookback)."""
    step = series.interval_s
    ts, vs = [], []
    t = (math.floor(start_excl / step) + 1) * step
    while t <= end:
        v = _instant(series, t)
        if v is not None:
            ts.append(t)
            vs.append(v)
        t += step
    return ts, vs


def _extrapolated_rate(ts: list[float], vs: list[float], start: float, end: float) -> float:
    """Prometheus' rate(): counter resets handled, extrapolated to the window's edges."""
    increase = vs[-1] - vs[0]
    for prev, cur in itertools.pairwise(vs):
        if cur < prev:
            increase += prev  # a reset: the counter restarted from 0
    sampled = ts[-1] - ts[0]
    avg_step = sampled / (len(ts) - 1)
    threshold = avg_step * 1.1
    to_start = ts[0] - start
    to_end = end - ts[-1]
    if to_start >= threshold:
        to_start = avg_step / 2
    if increase > 0 and vs[0] >= 0:
        to_zero = sampled * (vs[0] / increase)
        to_start = min(to_start, to_zero)
    if to_end >= threshold:
        to_end = avg_step / 2
    return increase * (sampled + to_start + to_end) / sampled / (end - start)


def _slope(ts: list[float], vs: list[float]) -> float:
    """deriv(): the least-squares slope per second."""
    n = len(ts)
    mt, mv = sum(ts) / n, sum(vs) / n
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / den if den else 0.0


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s != seconds:
        raise ValueError(f"PromQL durations here are whole seconds, got {seconds}")
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"
