"""Predictive scaling: provision now for the load one cold start from now.

A reactive autoscaler sees a burst only once it has queued, then waits a cold start for the
replicas it orders: a burst shorter than a cold start is served by the replicas that were
already there. This policy forecasts the arrival rate at `now + lead_time` (the cold start
plus a tick) from the recent past and orders the replicas for it now. The forecast is the
largest of three views:

- trend: the median rate of the newer half of `trend_window_s`, moved on by its change
  from the older half's median over the lead time, capped at `trend_cap` x the window's
  peak (medians: a burst is not a trend; a least-squares line through a step promises a
  ramp that never comes);
- burst-aware: the `burst_quantile` of per-bin rates over `burst_window_s`, so a bursty
  stream keeps capacity for its bursts, not its mean (its ratio to the mean is the burst
  index);
- seasonal (when `season_s` is set, e.g. 86400 for a diurnal cycle): the peak rate seen
  one season ago over the coming lead time.

Replicas needed = the larger of ceil(forecast / rate_per_replica) and the count that keeps
up with the forecast and drains the queue: within lead time + `backlog_drain_s` if the
replicas there now suffice, else (new ones serve only after the lead time) within
`backlog_drain_s` what will be queued by then. No cascade: the forecast does not grow
with the backlog, and the backlog count may not rise while any replica is starting (those replicas
are the answer to it; ordering more before they serve is the cascade of AIBrix #2670).
A decrease waits `scale_down_window_s` (the highest count over the window).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pydantic import ConfigDict

from burstguard.autoscale.fleet import FleetCounts
from burstguard.autoscale.policy import Decision, Signals

__all__ = ["Forecast", "PredictiveAutoscaler", "PredictiveParams", "forecast_rate"]


@dataclass(frozen=True, slots=True)
class PredictiveParams:
    """Forecast windows, capacity per replica and bounds; see the module docstring."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    rate_per_replica: float  # requests/s one replica serves within its SLO
    min_replicas: int = 1
    max_replicas: int = 100
    bin_s: float = 5.0
    trend_window_s: float = 600.0
    trend_cap: float = 1.25
    burst_window_s: float = 300.0
    burst_quantile: float = 0.95
    season_s: float | None = None
    lead_time_s: float | None = None  # None: the cold start's p90 plus one bin
    scale_down_window_s: float = 180.0  # the seed's "cooldown 2-5 min"
    backlog_drain_s: float = 300.0
    arrivals_metric: str = "burstguard_arrivals_total"
    queue_metric: str = "llm_request_queue_depth"

    def __post_init__(self) -> None:
        if self.rate_per_replica <= 0 or self.bin_s <= 0 or self.backlog_drain_s <= 0:
            raise ValueError("need rate_per_replica, bin_s and backlog_drain_s > 0")
        if self.trend_window_s < 2 * self.bin_s or self.burst_window_s < self.bin_s:
            raise ValueError("need trend_window_s >= 2 bins and burst_window_s >= 1 bin")
        if self.trend_cap < 1:
            raise ValueError("trend_cap must be >= 1")
        if not 0 < self.burst_quantile <= 1:
            raise ValueError("burst_quantile must be in (0, 1]")
        if self.season_s is not None and self.season_s < self.bin_s:
            raise ValueError("season_s must be at least one bin")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.scale_down_window_s < 0 or (self.lead_time_s is not None and self.lead_time_s < 0):
            raise ValueError("scale_down_window_s and lead_time_s must be >= 0")


@dataclass(frozen=True, slots=True)
class Forecast:
    """The rate expected at now + lead time, its three views and the burst index."""

    rate: float
    trend: float
    burst: float
    seasonal: float
    burst_index: float


def forecast_rate(rates: list[float], p: PredictiveParams, lead_time_s: float) -> Forecast:
    """Forecast from per-bin rates (oldest first, the last bin just ended)."""
    if not rates:
        return Forecast(0.0, 0.0, 0.0, 0.0, 1.0)
    n_trend = max(2, round(p.trend_window_s / p.bin_s))
    recent = rates[-n_trend:]
    trend = _robust_trend(recent, lead_time_s / p.bin_s)
    trend = max(0.0, min(trend, p.trend_cap * max(recent)))
    window = sorted(rates[-max(1, round(p.burst_window_s / p.bin_s)) :])
    burst = window[min(int(p.burst_quantile * len(window)), len(window) - 1)]
    mean = sum(window) / len(window)
    seasonal = 0.0
    if p.season_s is not None:
        back = round(p.season_s / p.bin_s)
        ahead = max(1, math.ceil(lead_time_s / p.bin_s))
        if len(rates) >= back:
            start = len(rates) - back
            seasonal = max(rates[start : start + ahead])
    return Forecast(
        max(trend, burst, seasonal), trend, burst, seasonal, burst / mean if mean > 0 else 1.0
    )


def _robust_trend(ys: list[float], steps_ahead: float) -> float:
    """The median of the newer half, moved on by the change of medians between the halves.

    Medians ignore bursts shorter than a quarter of the window, so a burst or a step reads
    as a level change only once it has lasted; a ramp (a diurnal climb) moves both."""
    if len(ys) < 2:
        return ys[-1]
    half = len(ys) // 2
    old, new = statistics.median(ys[:half]), statistics.median(ys[-half:])
    slope = (new - old) / half  # per bin: the halves' centres are `half` bins apart
    return new + slope * (half / 2 + steps_ahead)


class PredictiveAutoscaler:
    """Forecast-driven desired count; exported as `burstguard_desired_replicas`."""

    def __init__(
        self,
        params: PredictiveParams,
        *,
        initial_replicas: int,
        lead_time_s: float,
        start: float = 0.0,
    ) -> None:
        self.params = params
        self.lead_time_s = lead_time_s
        keep_s = max(p for p in (params.trend_window_s, params.burst_window_s) if p)
        if params.season_s is not None:
            keep_s = max(keep_s, params.season_s)
        self._keep = math.ceil(keep_s / params.bin_s) + 1
        self._rates: list[float] = []
        self._last_total: float | None = None
        self._last_at = start
        self._next_tick = start
        self._desired = initial_replicas
        self._backlog = 0
        self._recent: deque[tuple[float, int]] = deque()  # raw counts, for the scale-down window
        self.forecast = Forecast(0.0, 0.0, 0.0, 0.0, 1.0)

    @property
    def desired(self) -> int:
        return self._desired

    @property
    def gauges(self) -> Mapping[str, float]:
        f = self.forecast
        return {
            "forecast_rate": f.rate,
            "burst_index": f.burst_index,
            "lead_time_s": self.lead_time_s,
        }

    def next_tick_at(self) -> float:
        return self._next_tick

    def tick(self, now: float, signals: Signals, fleet: FleetCounts) -> Decision | None:
        p = self.params
        if now < self._next_tick:
            return None
        self._next_tick += p.bin_s * (math.floor((now - self._next_tick) / p.bin_s) + 1)
        total = signals.get(p.arrivals_metric, 0.0)
        if self._last_total is not None and now > self._last_at:
            # over the time the arrivals came in: a live tick is late by its timer or its
            # scrape, and a bin's worth of time divided into a longer count overstates it
            elapsed = now - self._last_at
            self._rates.append(max(total - self._last_total, 0.0) / elapsed)
            if len(self._rates) > 2 * self._keep:
                del self._rates[: -self._keep]
        self._last_total, self._last_at = total, now
        self.forecast = forecast_rate(self._rates, p, self.lead_time_s)
        for_rate = math.ceil(self.forecast.rate / p.rate_per_replica - 1e-9)
        backlog = self._backlog_replicas(signals.get(p.queue_metric, 0.0), fleet.current)
        if fleet.starting > 0:  # no cascade: what is starting is the answer to the backlog
            backlog = min(backlog, self._backlog)
        self._backlog = backlog
        raw = min(max(for_rate, backlog, p.min_replicas), p.max_replicas)
        self._recent.append((now, raw))
        while len(self._recent) > 1 and self._recent[0][0] <= now - p.scale_down_window_s:
            self._recent.popleft()
        new = max(v for _, v in self._recent)  # up at once, down after the window
        if new == self._desired:
            return None
        self._desired = new
        f = self.forecast
        return Decision(
            now,
            new,
            f"predictive: forecast {f.rate:.3g}/s in {self.lead_time_s:.0f} s"
            + (f", backlog needs {self._backlog}" if self._backlog > for_rate else ""),
            {
                "forecast_rate": f.rate,
                "burst_index": f.burst_index,
                "backlog_replicas": self._backlog,
            },
        )

    def _backlog_replicas(self, queue: float, current: int) -> int:
        """Replicas that keep up with the forecast and drain the queue: within lead time +
        backlog_drain_s if the `current` ones suffice; else, as new ones serve only after
        the lead time, within backlog_drain_s what is queued by then (the queue now plus
        what the current ones fall behind today's rate meanwhile)."""
        p = self.params
        mu, lam = p.rate_per_replica, self.forecast.rate
        lead, drain = self.lead_time_s, p.backlog_drain_s
        keep_up = math.ceil((queue / (lead + drain) + lam) / mu - 1e-9)
        if keep_up <= current:
            return keep_up
        rate_now = self._rates[-1] if self._rates else 0.0
        queued_then = max(queue + (rate_now - current * mu) * lead, 0.0)
        return math.ceil((queued_then / drain + lam) / mu - 1e-9)
