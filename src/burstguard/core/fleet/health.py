"""A backend's health: active /health probes, passive request failures, a circuit breaker.

Pure state machines driven by timestamps (no clock read here):

- `CircuitBreaker`: *closed* (routable) until `failure_threshold` failures in a row —
  counted separately for requests (connection refused or reset, 5xx, timeout before the
  first token) and for probes, so a /health that answers does not hide an engine failing
  every request — then *open* (no traffic) for `open_s`, then *half-open*: probes (and,
  with `half_open_requests`, one trial request at a time) test it; `success_threshold`
  successes in a row close it, any failure opens it again for `open_s`. A success
  reported while open is ignored (a stream that started before the failures says nothing
  about the backend now).
- `HealthCheck`: the breaker plus the probe schedule (one probe in flight, one every
  `probe_interval_s`) and `up`, the last probe's answer.

With the defaults (3 failures, 0.5 s open, 0.25 s probes, 2 successes) a dead replica stops
getting requests after its third failure and is back ~0.75 s after it answers again.
"""

from __future__ import annotations

import enum
import math

from burstguard.core.fleet.config import HealthConfig


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


CIRCUIT_CODES = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}
"""The numbers a gauge exports for each state."""


class CircuitBreaker:
    """closed -> open after N failures in a row; open -> half-open after `open_s`;
    half-open -> closed after M successes, -> open on a failure."""

    def __init__(self, cfg: HealthConfig) -> None:
        self._cfg = cfg
        self._state = CircuitState.CLOSED
        self._opened_at = -math.inf
        self._request_fails = 0
        self._probe_fails = 0
        self._successes = 0
        self._trial = False  # a half-open trial request is in flight
        self.opened = 0  # times it opened

    def state(self, now: float) -> CircuitState:
        if self._state is CircuitState.OPEN and now >= self._opened_at + self._cfg.open_s:
            self._state = CircuitState.HALF_OPEN
            self._successes = 0
            self._trial = False
        return self._state

    def allows(self, now: float) -> bool:
        """May a request be sent now? Half-open: only with `half_open_requests`, one trial
        at a time (by default the probes alone decide, so a dead replica gets no request
        after its circuit opened)."""
        state = self.state(now)
        if state is CircuitState.HALF_OPEN:
            return self._cfg.half_open_requests and not self._trial
        return state is CircuitState.CLOSED

    def on_send(self, now: float) -> None:
        """A request was sent to it (marks the half-open trial)."""
        if self.state(now) is CircuitState.HALF_OPEN:
            self._trial = True

    def on_unsent(self) -> None:
        """The request `on_send` announced was never sent: the trial slot is free again."""
        self._trial = False

    def on_success(self, now: float, probe: bool = False) -> None:
        state = self.state(now)
        if state is CircuitState.CLOSED:
            if probe:
                self._probe_fails = 0
            else:
                self._request_fails = 0
        elif state is CircuitState.HALF_OPEN:
            if not probe:
                self._trial = False
            self._successes += 1
            if self._successes >= self._cfg.success_threshold:
                self._state = CircuitState.CLOSED
                self._request_fails = self._probe_fails = 0

    def on_failure(self, now: float, probe: bool = False) -> None:
        state = self.state(now)
        if state is CircuitState.CLOSED:
            if probe:
                self._probe_fails += 1
            else:
                self._request_fails += 1
            if max(self._probe_fails, self._request_fails) >= self._cfg.failure_threshold:
                self._open(now)
        elif state is CircuitState.HALF_OPEN:
            self._open(now)

    def _open(self, now: float) -> None:
        self._state = CircuitState.OPEN
        self._opened_at = now
        self._trial = False
        self.opened += 1


class HealthCheck:
    """A backend's breaker, probe schedule and last probe result."""

    def __init__(self, cfg: HealthConfig, now: float) -> None:
        self._cfg = cfg
        self.breaker = CircuitBreaker(cfg)
        self.up = True  # optimistic until a probe says otherwise: a new replica gets traffic
        self._next_probe = now
        self._probing = False

    def probe_due(self, now: float) -> bool:
        return not self._probing and now >= self._next_probe

    def on_probe_sent(self, now: float) -> None:
        self._probing = True
        self._next_probe = now + self._cfg.probe_interval_s

    def on_probe_result(self, ok: bool, now: float) -> None:
        self._probing = False
        self.up = ok
        if ok:
            self.breaker.on_success(now, probe=True)
        else:
            self.breaker.on_failure(now, probe=True)
