"""Admission: how fast the backend drains work, how long a newcomer would wait, how much may
be in flight.

- `ServiceRate` measures the backend's service rate (tokens/s or requests/s) from finish
  events, but only over time when the gateway held a backlog: then the backend ran at the
  capacity the gateway allowed, and the figure is a capacity, not the arrival rate.
  Samples enter an EWMA with a half-life in seconds.
- `estimate_wait` divides the work queued ahead of a request by the rate left to it: with
  strict priority, work of higher classes admitted while it waits passes it, so it drains
  at the service rate minus their inflow (`ClassInflow`; an M/G/1 priority queue's
  residual capacity) — when they take it all, it would wait until aging lets it through.
  A class with a guaranteed share of the slots (`min_in_flight_fraction`) keeps at least
  that share of the rate, and the classes above it lose what it takes of its share.
  The core rejects a request whose estimate exceeds its class's queue deadline at once,
  with a Retry-After from the time the excess takes to drain, instead of queueing it to
  be shed at its deadline.
- `InFlightLimits` keeps the engine's own waiting queue near zero, so the order is decided
  here, where it can be chosen: when the backend reports waiting requests (two scrapes in
  a row, so a just-dispatched request still being scheduled does not count) or a KV usage
  above `kv_high`, the request cap drops to what the engine actually runs and the token
  budget to the tokens that ran; while the caps bind and the backend is calm (no waiting,
  KV below `kv_low`) they grow by `grow_fraction` per scrape. Without metrics the
  configured caps hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.config import AdmissionConfig

_WINDOW_S = 1.0  # saturated time that makes one rate sample
_PROVISIONAL_S = 0.25  # saturated time before a partial window stands in for the first sample


class ServiceRate:
    """EWMA of work finished per second of saturated time."""

    def __init__(self, half_life_s: float, prior: float | None) -> None:
        self._half_life = half_life_s
        self._ewma: float | None = prior
        self._last = 0.0
        self._saturated = False
        self._sat_time = 0.0
        self._sat_work = 0.0

    def observe(self, now: float, saturated: bool) -> None:
        """Advances the clock; `saturated`: the gateway holds a backlog from now on."""
        if self._saturated and now > self._last:
            self._sat_time += now - self._last
            if self._sat_time >= _WINDOW_S:
                self._sample()
        self._last = max(self._last, now)
        self._saturated = saturated

    @property
    def rate(self) -> float | None:
        """The EWMA; before its first sample, what the partial window has seen finish (else
        a burst's first second reads as no rate, so no wait, and admits what it must shed)."""
        if self._ewma is not None:
            return self._ewma
        if self._sat_time >= _PROVISIONAL_S and self._sat_work > 0:
            return self._sat_work / self._sat_time
        return None

    def on_finish(self, now: float, work: float) -> None:
        """`work` finished at `now` (call `observe` first)."""
        if self._saturated:
            self._sat_work += work

    def _sample(self) -> None:
        sample = self._sat_work / self._sat_time
        if self._ewma is None:
            self._ewma = sample
        else:
            alpha = 1.0 - math.pow(0.5, self._sat_time / self._half_life)
            self._ewma += alpha * (sample - self._ewma)
        self._sat_time = self._sat_work = 0.0


class ClassInflow:
    """Work admitted per second, per class rank: an exponentially weighted rate (each
    admission adds work x ln2 / half-life, and the sum decays with the half-life).

    From a cold start the sum is low by the factor 1 - 0.5^(elapsed / half-life) — a
    burst's first seconds would look calm and let lower classes in to starve — so it is
    divided by that factor, with elapsed counted from the first admission and at least
    _WINDOW_S (so one early admission does not read as a huge rate)."""

    def __init__(self, half_life_s: float) -> None:
        self._half_life = half_life_s
        self._value: dict[int, float] = {}
        self._last = 0.0
        self._start: float | None = None

    def _decay(self, now: float) -> None:
        if now > self._last:
            k = math.pow(0.5, (now - self._last) / self._half_life)
            for rank in self._value:
                self._value[rank] *= k
            self._last = now

    def add(self, now: float, rank: int, work: float) -> None:
        self._decay(now)
        if self._start is None:
            self._start = now
        self._value[rank] = self._value.get(rank, 0.0) + work * math.log(2) / self._half_life

    def above(self, now: float, rank: int) -> float:
        """Inflow of the classes served before `rank` (lower ranks)."""
        return self._sum(now, lambda r: r < rank)

    def of(self, now: float, rank: int) -> float:
        """Inflow of the class `rank` itself."""
        return self._sum(now, lambda r: r == rank)

    def _sum(self, now: float, which: Callable[[int], bool]) -> float:
        if self._start is None:
            return 0.0
        self._decay(now)
        elapsed = max(now - self._start, _WINDOW_S)
        warm = 1.0 - math.pow(0.5, elapsed / self._half_life)
        return sum(v for r, v in self._value.items() if which(r)) / warm


def estimate_wait(work_ahead: float, rate: float | None, inflow_above: float = 0.0) -> float:
    """Seconds until `work_ahead` drains at `rate` less the inflow of classes that pass
    it; 0 with nothing ahead or no measured rate yet; inf when they leave it no rate."""
    if work_ahead <= 0 or not rate:
        return 0.0
    residual = rate - inflow_above
    if residual <= 0.05 * rate:
        return math.inf
    return work_ahead / residual


class InFlightLimits:
    """The request cap and token budget the dispatcher obeys, adapted from backend metrics."""

    def __init__(self, cfg: AdmissionConfig, interval_s: float) -> None:
        self._cfg = cfg
        self._interval = interval_s
        self.requests: float = float(cfg.max_in_flight)
        self.tokens: float = (
            math.inf if cfg.max_in_flight_tokens is None else (cfg.max_in_flight_tokens)
        )
        self._next_at = -math.inf
        self._prev_waiting = 0
        self.bound = False  # the caps held a request back since the last adaptation

    def observe(
        self, now: float, backend: BackendState | None, in_flight: int, in_flight_tokens: int
    ) -> None:
        """Adapts the caps at most once per scrape interval from the backend's state."""
        cfg = self._cfg
        if not cfg.adapt or backend is None or now < self._next_at:
            return
        if backend.waiting is None and backend.kv_usage is None:
            return
        self._next_at = now + self._interval
        waiting = backend.waiting or 0
        queued = waiting > cfg.target_waiting and self._prev_waiting > cfg.target_waiting
        self._prev_waiting = waiting
        kv = backend.kv_usage
        if queued or (kv is not None and kv > cfg.kv_high):
            self._shrink(backend, queued, in_flight, in_flight_tokens)
        elif self.bound and waiting <= cfg.target_waiting and (kv is None or kv < cfg.kv_low):
            self._grow()
        self.bound = False

    def _shrink(
        self, backend: BackendState, queued: bool, in_flight: int, in_flight_tokens: int
    ) -> None:
        cfg = self._cfg
        if queued and backend.running is not None:
            runs = backend.running  # what the engine really runs at once
        else:
            runs = math.floor(in_flight * (1.0 - cfg.grow_fraction))
        new = max(cfg.min_in_flight, min(self.requests, runs))
        if in_flight and in_flight_tokens:
            share = min(1.0, max(new, 1) / in_flight)
            self.tokens = min(self.tokens, max(1.0, in_flight_tokens * share))
        self.requests = new

    def _grow(self) -> None:
        cfg = self._cfg
        self.requests = min(cfg.max_in_flight, self.requests * (1 + cfg.grow_fraction) + 1)
        cap = math.inf if cfg.max_in_flight_tokens is None else cfg.max_in_flight_tokens
        self.tokens = min(cap, self.tokens * (1 + cfg.grow_fraction))
