"""Circuit breaker transitions and the probe schedule, on explicit timestamps."""

from __future__ import annotations

from burstguard.core.fleet.config import HealthConfig
from burstguard.core.fleet.health import CircuitBreaker, CircuitState, HealthCheck

CFG = HealthConfig(failure_threshold=3, open_s=1.0, success_threshold=2, probe_interval_s=0.25)


def test_opens_after_n_failures_in_a_row_only() -> None:
    b = CircuitBreaker(CFG)
    b.on_failure(0.0)
    b.on_failure(0.1)
    b.on_success(0.2)  # a success breaks the run
    b.on_failure(0.3)
    b.on_failure(0.4)
    assert b.state(0.4) is CircuitState.CLOSED and b.allows(0.4)
    b.on_failure(0.5)
    assert b.state(0.5) is CircuitState.OPEN and not b.allows(0.5)
    assert b.opened == 1


def test_probe_successes_do_not_hide_failing_requests() -> None:
    b = CircuitBreaker(CFG)
    for t in (0.0, 0.1, 0.2):
        b.on_success(t, probe=True)  # /health answers...
        b.on_failure(t + 0.05)  # ...but every request fails
    assert b.state(0.3) is CircuitState.OPEN


def test_half_open_after_open_s_then_closes_after_m_successes() -> None:
    b = CircuitBreaker(CFG)
    for t in (0.0, 0.1, 0.2):
        b.on_failure(t, probe=True)
    assert b.state(1.19) is CircuitState.OPEN
    b.on_success(1.0, probe=True)  # while open: ignored
    assert b.state(1.2) is CircuitState.HALF_OPEN
    b.on_success(1.25, probe=True)
    assert b.state(1.25) is CircuitState.HALF_OPEN
    b.on_success(1.5, probe=True)
    assert b.state(1.5) is CircuitState.CLOSED


def test_half_open_takes_no_request_by_default() -> None:
    b = CircuitBreaker(CFG)
    for t in (0.0, 0.1, 0.2):
        b.on_failure(t)
    assert b.state(1.3) is CircuitState.HALF_OPEN and not b.allows(1.3)  # probes decide


def test_half_open_failure_reopens_and_allows_one_trial_request() -> None:
    b = CircuitBreaker(CFG.model_copy(update={"half_open_requests": True}))
    for t in (0.0, 0.1, 0.2):
        b.on_failure(t)
    assert b.allows(1.3)  # half-open: one trial
    b.on_send(1.3)
    assert not b.allows(1.31)  # the trial is out
    b.on_failure(1.4)
    assert b.state(1.4) is CircuitState.OPEN
    assert b.state(2.39) is CircuitState.OPEN and b.state(2.4) is CircuitState.HALF_OPEN
    b.on_send(2.5)
    b.on_success(2.6)  # the trial succeeded: another may go
    assert b.allows(2.6)
    b.on_send(2.7)
    b.on_unsent()  # ...it was never sent after all
    assert b.allows(2.7)


def test_probe_schedule_one_in_flight_and_up_flag() -> None:
    h = HealthCheck(CFG, now=0.0)
    assert h.probe_due(0.0)
    h.on_probe_sent(0.0)
    assert not h.probe_due(0.5)  # still in flight
    h.on_probe_result(False, 0.6)
    assert not h.up
    assert h.probe_due(0.6)
    h.on_probe_sent(0.6)
    h.on_probe_result(True, 0.61)
    assert h.up and not h.probe_due(0.8) and h.probe_due(0.85)
