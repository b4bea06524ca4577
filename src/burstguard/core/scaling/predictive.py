"""Predictive scaling: provision now for the work one cold start from now.

A reactive autoscaler sees a burst only once it has queued, then waits a cold start for the
replicas it orders: a burst shorter than a cold start is served by the replicas that were
already there. This policy forecasts the token work arriving at `now + lead_time` (the
cold start plus a tick) from the recent past, for each kind of work (prompt tokens to
prefill, output tokens to decode; `core.scaling.work`), and orders the replicas for it now,
dividing by what a replica serves: a capacity learned from the fleet while it is busy
(`core.scaling.capacity`), seeded by a prior (the engine profile's figure for the current
mix, `core.scaling.prior`, or a hand-set `rate_per_replica`). Each forecast is the largest
of three views:

- trend: the median rate of the newer half of `trend_window_s`, moved on by its change
  from the older half's median over the lead time, capped at `trend_cap` x the window's
  peak (medians: a burst is not a trend; a least-squares line through a step promises a
  ramp that never comes);
- burst-aware: the `burst_quantile` of per-bin rates over `burst_window_s`, so a bursty
  stream keeps capacity for its bursts, not its mean (its ratio to the mean is the burst
  index);
- seasonal (when `season_s` is set, e.g. 86400 for a diurnal cycle): the peak rate seen
  one season ago over the coming lead time.

Replicas needed = the largest of ceil(forecast work / (capacity x target_utilization)),
the reactive floor, and the count that keeps up with the forecast and drains the queue:
within lead time + `backlog_drain_s` if the replicas there now suffice, else (new ones
serve only after the lead time) within `backlog_drain_s` what will be queued by then.
No cascade: the forecast does not grow with the backlog, and the backlog count (and the
floor) may not rise while any replica is starting (those replicas are the answer to it;
ordering more before they serve is the cascade of AIBrix #2670).
The reactive floor: when the queue grows while nothing is starting (the fleet has what
the forecast said would do, and it does not), the policy asks for at least what a
queue-depth policy would, ceil(queue / `queue_per_replica`), so a wrong forecast or
capacity cannot starve the fleet. A decrease waits `scale_down_window_s` (the highest
count over the window). Each decision names the term that decided it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pydantic import ConfigDict

from burstguard.core.scaling.capacity import CapacityLearner, LearnerParams
from burstguard.core.scaling.policy import Decision, Signals
from burstguard.core.scaling.prior import CapacityPrior
from burstguard.core.scaling.replica_pool import FleetCounts
from burstguard.core.scaling.work import WorkMeter

__all__ = [
    "Forecast",
    "PredictiveAutoscaler",
    "PredictiveParams",
    "forecast_rate",
]


@dataclass(frozen=True, slots=True)
class PredictiveParams:
    """Forecast windows, capacity learning and bounds; see the module docstring."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    rate_per_replica: float | None = None  # a hand-set prior (req/s within the SLO)
    target_utilization: float = 0.7  # of a busy replica's learned capacity
    queue_per_replica: float = 5.0  # the reactive floor's waiting requests per replica
    learn_capacity: bool = True
    capacity_window_s: float = 300.0  # busy seconds the estimate averages
    capacity_settle_s: float = 30.0  # a replica count must hold this long to be measured
    capacity_max_change_per_min: float = 2.0  # factor per busy minute
    prior_profile: str | None = None  # the prior's engine profile; None: the driver's own
    mix_window_s: float = 120.0
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
        if self.rate_per_replica is not None and self.rate_per_replica <= 0:
            raise ValueError("rate_per_replica must be > 0 (or left out: learned)")
        if self.bin_s <= 0 or self.backlog_drain_s <= 0 or self.queue_per_replica <= 0:
            raise ValueError("need bin_s, backlog_drain_s and queue_per_replica > 0")
        if not 0 < self.target_utilization <= 1:
            raise ValueError("target_utilization must be in (0, 1]")
        if self.capacity_window_s <= 0 or self.capacity_settle_s < 0 or self.mix_window_s <= 0:
            raise ValueError("need capacity_window_s, mix_window_s > 0, capacity_settle_s >= 0")
        if self.capacity_max_change_per_min <= 1:
            raise ValueError("capacity_max_change_per_min must be > 1 (a factor)")
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


DEFAULT_MIX = (512.0, 128.0)  # prompt, output tokens per request until the feed shows its own
WAITING = "burstguard_backend_waiting_requests"


class PredictiveAutoscaler:
    """Forecast-driven desired count; exported as `burstguard_desired_replicas`."""

    def __init__(
        self,
        params: PredictiveParams,
        *,
        initial_replicas: int,
        lead_time_s: float,
        start: float = 0.0,
        prior: CapacityPrior | None = None,
    ) -> None:
        """`prior`: tokens per replica-second for a mix (the engine profile's); needed
        unless `rate_per_replica` is set."""
        if prior is None and params.rate_per_replica is None:
            raise ValueError("a capacity prior or rate_per_replica is needed")
        self.params = params
        self.lead_time_s = lead_time_s
        self._prior = prior
        keep_s = max(p for p in (params.trend_window_s, params.burst_window_s) if p)
        if params.season_s is not None:
            keep_s = max(keep_s, params.season_s)
        self._keep = math.ceil(keep_s / params.bin_s) + 1
        self._series: dict[str, list[float]] = {"requests": [], "prompt": [], "output": []}
        self._work = WorkMeter(params.arrivals_metric, params.mix_window_s)
        self._learner = CapacityLearner(
            LearnerParams(
                window_s=params.capacity_window_s,
                min_busy_s=params.capacity_window_s / 2,
                settle_s=params.capacity_settle_s,
                max_change_per_min=params.capacity_max_change_per_min,
            )
        )
        self._next_tick = start
        self._desired = initial_replicas
        self._backlog = 0
        self._busy = False
        self._queue = 0.0
        self._ready = -1
        self._ready_since = start
        self._recent: deque[tuple[float, int]] = deque()  # raw counts, for the scale-down window
        self.forecast = Forecast(0.0, 0.0, 0.0, 0.0, 1.0)
        self.forecast_prompt = Forecast(0.0, 0.0, 0.0, 0.0, 1.0)
        self.forecast_output = Forecast(0.0, 0.0, 0.0, 0.0, 1.0)
        self.prior = self._prior_for(*DEFAULT_MIX)
        self.floor = 0
        self.decided_by = "min"

    @property
    def desired(self) -> int:
        return self._desired

    @property
    def capacity(self) -> float:
        """Tokens (requests, on a request-count feed) one busy replica serves per second,
        for the current mix: the learned correction x the prior."""
        return self._learner.capacity(self.prior)

    @property
    def gauges(self) -> Mapping[str, float]:
        return {
            "forecast_rate": self.forecast.rate,
            "forecast_prompt_tokens_per_s": self.forecast_prompt.rate,
            "forecast_output_tokens_per_s": self.forecast_output.rate,
            "capacity_tokens_per_s": self.capacity,
            "capacity_prior_tokens_per_s": self.prior,
            "capacity_correction": self._learner.correction,
            "floor_replicas": self.floor,
            "burst_index": self.forecast.burst_index,
            "lead_time_s": self.lead_time_s,
        }

    def next_tick_at(self) -> float:
        return self._next_tick

    def _prior_for(self, prompt: float, output: float) -> float:
        """The prior for a mix (per request): in tokens, or requests on a count feed."""
        p = self.params
        tokens = prompt + output
        if p.rate_per_replica is not None:  # a rate within the SLO: busy capacity is more
            return p.rate_per_replica * (tokens if tokens > 0 else 1.0) / p.target_utilization
        assert self._prior is not None
        if tokens <= 0:  # a request-count feed: the prior's default mix, per request
            return self._prior(*DEFAULT_MIX) / sum(DEFAULT_MIX)
        return self._prior(prompt, output)

    def tick(self, now: float, signals: Signals, fleet: FleetCounts) -> Decision | None:
        p = self.params
        if now < self._next_tick:
            return None
        self._next_tick += p.bin_s * (math.floor((now - self._next_tick) / p.bin_s) + 1)
        queue = signals.get(p.queue_metric, 0.0)
        busy = queue > 0 or signals.get(WAITING, 0.0) >= max(fleet.ready, 1)
        if fleet.ready != self._ready:
            self._ready, self._ready_since = fleet.ready, now
        sample = self._work.update(now, signals)
        if sample is not None:
            # over the time the arrivals came in: a live tick is late by its timer or its
            # scrape, and a bin's worth of time divided into a longer count overstates it
            for name, rate in (("requests", sample.requests), ("prompt", sample.prompt),
                               ("output", sample.output)):  # fmt: skip
                series = self._series[name]
                series.append(rate)
                if len(series) > 2 * self._keep:
                    del series[: -self._keep]
            if self._work.tokens:
                self.prior = self._prior_for(sample.prompt_per_request, sample.output_per_request)
            else:
                self.prior = self._prior_for(0.0, 0.0)
            settled = now - sample.dt >= self._ready_since + p.capacity_settle_s
            if p.learn_capacity and self._work.tokens and busy and self._busy and settled:
                # against the prior of the mix these tokens came from: the interval's own
                # completions (the window's mix lags a change by its length)
                mix = sample.served_mix
                prior = self.prior if mix is None else self._prior_for(*mix)
                self._learner.observe(sample.dt, sample.served, fleet.ready * sample.dt, prior)
        self._busy = busy
        self.forecast = forecast_rate(self._series["requests"], p, self.lead_time_s)
        self.forecast_prompt = forecast_rate(self._series["prompt"], p, self.lead_time_s)
        self.forecast_output = forecast_rate(self._series["output"], p, self.lead_time_s)
        work = self.forecast_prompt.rate + self.forecast_output.rate
        per_replica = self.capacity * p.target_utilization
        for_work = math.ceil(work / per_replica - 1e-9)
        backlog = self._backlog_replicas(queue, fleet.current, work, per_replica)
        if fleet.starting > 0:  # no cascade: what is starting is the answer to the backlog
            backlog = min(backlog, self._backlog)
        self._backlog = backlog
        # the reactive floor: the queue grows though nothing is starting, so the fleet the
        # forecast asked for is not keeping up; at least what a queue-depth policy asks
        growing = queue > self._queue and fleet.starting == 0
        self.floor = math.ceil(queue / p.queue_per_replica - 1e-9) if growing else 0
        self._queue = queue
        terms = {"forecast": for_work, "backlog": backlog, "floor": self.floor,
                 "min": p.min_replicas}  # fmt: skip
        decided_by = max(terms, key=lambda k: terms[k])  # first of equals: forecast first
        raw = terms[decided_by]
        if raw > p.max_replicas:
            raw, decided_by = p.max_replicas, f"{decided_by} (capped at max)"
        self._recent.append((now, raw))
        while len(self._recent) > 1 and self._recent[0][0] <= now - p.scale_down_window_s:
            self._recent.popleft()
        new = max(v for _, v in self._recent)  # up at once, down after the window
        if new == self._desired:
            return None
        if new != raw:
            decided_by = "scale-down window"
        self._desired = new
        self.decided_by = decided_by
        return Decision(
            now,
            new,
            f"predictive: {decided_by} decided; forecast {work:.4g} tokens/s in "
            f"{self.lead_time_s:.0f} s over {self.capacity:.4g} per replica x "
            f"{p.target_utilization:g}"
            + (f", floor {self.floor}" if self.floor else "")
            + (f", backlog {backlog}" if backlog > for_work else ""),
            {
                "forecast_rate": self.forecast.rate,
                "forecast_tokens_per_s": work,
                "capacity_tokens_per_s": self.capacity,
                "forecast_replicas": for_work,
                "backlog_replicas": backlog,
                "floor_replicas": self.floor,
                "burst_index": self.forecast.burst_index,
            },
        )

    def _backlog_replicas(self, queue: float, current: int, lam: float, mu: float) -> int:
        """Replicas that keep up with the forecast work `lam` and drain the queue (`mu`:
        work per replica): within lead time + backlog_drain_s if the `current` ones
        suffice; else, as new ones serve only after the lead time, within backlog_drain_s
        what is queued by then (the queue now plus what the current ones fall behind
        today's rate meanwhile). The queue's work: its requests x the mix's tokens."""
        p = self.params
        queued = queue * self._work.tokens_per_request
        lead, drain = self.lead_time_s, p.backlog_drain_s
        keep_up = math.ceil((queued / (lead + drain) + lam) / mu - 1e-9)
        if keep_up <= current:
            return keep_up
        s = self._series
        rate_now = s["prompt"][-1] + s["output"][-1] if s["prompt"] else 0.0
        queued_then = max(queued + (rate_now - current * mu) * lead, 0.0)
        return math.ceil((queued_then / drain + lam) / mu - 1e-9)
