"""Fleet: membership diffs with draining, routing bookkeeping, failover, readiness."""

from __future__ import annotations

import pytest

from burstguard.core.fleet.config import FleetConfig, HealthConfig, RetryBudgetConfig
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.health import CircuitState
from burstguard.core.fleet.membership import Membership
from burstguard.core.fleet.router import RouteRequest
from burstguard.core.fleet.state import BackendState

A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"
REQ = RouteRequest(100)


def test_membership_diff_added_draining_restored() -> None:
    m = Membership()
    assert m.update([A, B]).added == (A, B)
    change = m.update([B, C])
    assert (change.added, change.draining, change.restored) == ((C,), (A,), ())
    assert m.active == (B, C) and m.draining == (A,)
    change = m.update([A, B, C])
    assert change.restored == (A,) and change.added == () and m.draining == ()
    assert not m.update([A, B, C])
    m.update([A])
    assert m.drop(B) and not m.drop(A)  # only draining backends are dropped


def test_removed_backend_drains_then_is_forgotten() -> None:
    fleet = Fleet(FleetConfig(), [A, B])
    sent = {fleet.route(f"r{i}", REQ, 0.0) for i in range(4)}
    assert sent == {A, B}
    on_a = [f"r{i}" for i in range(4) if fleet.backend_of(f"r{i}") == A]
    change = fleet.set_backends([B], 1.0)
    assert change.draining == (A,) and change.removed == ()
    assert all(fleet.route(f"n{i}", REQ, 1.0) == B for i in range(5))  # no new requests to A
    assert fleet.on_done(on_a[0], 2.0) is None  # one still in flight there
    assert fleet.on_done(on_a[1], 2.1) == A  # the last one: A is gone
    assert fleet.backends == (B,)
    # a draining backend with nothing in flight is removed at once
    assert fleet.set_backends([], 3.0).removed == ()
    fleet2 = Fleet(FleetConfig(), [A, B])
    assert fleet2.set_backends([A], 0.0).removed == (B,)


def test_failover_goes_to_an_untried_backend_and_counts() -> None:
    fleet = Fleet(FleetConfig(), [A, B, C])
    url = fleet.route("r1", REQ, 0.0)
    assert url is not None
    first = fleet.on_failure("r1", "connect", 0.1)
    assert first.outcome == "failover" and first.backend not in (None, url)
    second = fleet.on_failure("r1", "status_5xx", 0.2)
    assert second.outcome == "failover" and second.backend not in (url, first.backend)
    assert fleet.tried("r1") == (url, first.backend, second.backend)
    third = fleet.on_failure("r1", "timeout", 0.3)
    assert third.outcome == "no_backend" and third.backend is None
    assert third.tried == (url, first.backend, second.backend)
    stats = {s.url: s for s in fleet.stats(0.3)}
    assert sum(s.failovers for s in stats.values()) == 2
    assert stats[url].failures == {"connect": 1}
    assert all(s.in_flight == 0 for s in stats.values())
    assert fleet.failover_outcomes == {"failover": 2, "no_backend": 1}
    fleet.route("r2", REQ, 0.4)
    with pytest.raises(ValueError, match="failure reason"):
        fleet.on_failure("r2", "bogus", 0.4)


def test_failover_respects_budget_and_retryable() -> None:
    cfg = FleetConfig(retry_budget=RetryBudgetConfig(ratio=0.0, min_concurrency=1))
    fleet = Fleet(cfg, [A, B])
    for i in range(3):
        fleet.route(f"r{i}", REQ, 0.0)
    assert fleet.on_failure("r0", "reset", 0.1).outcome == "failover"  # the floor
    assert fleet.on_failure("r1", "reset", 0.1).outcome == "budget"
    assert fleet.on_failure("r2", "reset", 0.1, retryable=False).outcome == "not_retryable"


def test_dead_backend_is_skipped_after_threshold_and_returns_after_probes() -> None:
    health = HealthConfig(failure_threshold=3, open_s=1.0, success_threshold=2)
    fleet = Fleet(FleetConfig(health=health), [A, B])
    for i in range(6):
        fleet.route(f"r{i}", REQ, 0.0)
    dead = [f"r{i}" for i in range(6) if fleet.backend_of(f"r{i}") == A]
    for rid in dead:
        assert fleet.on_failure(rid, "connect", 0.1).backend == B
    assert {s.url: s.circuit for s in fleet.stats(0.1)}[A] is CircuitState.OPEN
    assert all(fleet.route(f"x{i}", REQ, 0.2) == B for i in range(10))
    assert fleet.ready(0.2)  # B is healthy
    fleet.on_probe(A, True, 1.2)  # half-open now
    fleet.on_probe(A, True, 1.45)
    assert {s.url: s.healthy for s in fleet.stats(1.45)}[A]
    assert A in {fleet.route(f"y{i}", REQ, 1.5) for i in range(4)}


def test_ready_needs_a_closed_circuit_and_probes_are_scheduled() -> None:
    fleet = Fleet(FleetConfig(), [A])
    assert fleet.probes_due(0.0) == [A]
    assert fleet.probes_due(0.1) == []  # in flight
    for t in (0.2, 0.5, 0.8):
        fleet.on_probe(A, False, t)
        fleet.probes_due(t)
    assert not fleet.ready(0.8)
    assert fleet.route("r", REQ, 0.8) is None


def test_stale_metrics_steer_routing_and_age_is_reported() -> None:
    fleet = Fleet(FleetConfig(), [A, B])
    fleet.on_metrics(A, BackendState(waiting=0, running=0, kv_usage=0.0), 0.0)
    fleet.on_metrics(B, BackendState(waiting=0, running=2, kv_usage=0.3), 0.0)
    fleet.route("busy", REQ, 0.0)  # load one so that the idle one would win on score
    fleet.on_metrics(B, BackendState(waiting=0, running=2, kv_usage=0.3), 2.9)
    fleet.on_metrics(A, None, 2.9)  # A's scrape failed: its metrics are 3 s old
    ages = {s.url: s.metrics_age_s for s in fleet.stats(3.0)}
    assert ages[A] == pytest.approx(3.0) and ages[B] == pytest.approx(0.1)
    assert all(fleet.route(f"r{i}", REQ, 3.0) == B for i in range(3))


def test_a_draining_backend_that_fails_its_last_request_is_forgotten() -> None:
    fleet = Fleet(FleetConfig(), [A, B])
    fleet.route("r1", REQ, 0.0)
    fleet.route("r2", REQ, 0.0)
    on_a = "r1" if fleet.backend_of("r1") == A else "r2"
    fleet.set_backends([B], 0.5)
    answer = fleet.on_failure(on_a, "reset", 0.6)
    assert answer.outcome == "failover" and answer.backend == B and answer.removed == A
    assert fleet.backends == (B,)


def test_has_room_and_unroute_give_the_slot_back() -> None:
    fleet = Fleet(FleetConfig(), [A])
    fleet.set_cap(A, 1)
    assert fleet.has_room(0.0)
    assert fleet.route("r1", REQ, 0.0) == A
    assert not fleet.has_room(0.0) and fleet.route("r2", REQ, 0.0) is None
    fleet.unroute("r1")  # its lease was refused: never sent
    assert fleet.has_room(0.0) and fleet.backend_of("r1") is None
    assert fleet.stats(0.0)[0].routed == 0
    assert fleet.route("r1", REQ, 0.1) == A


def test_score_learns_each_backends_pace_and_sends_the_faster_more() -> None:
    """Two idle backends, A's streams twice as slow per token as B's: once both are
    learned, B takes the requests while its work ahead, timed at its pace, is below A's
    (about two requests to A's one). Without learning (speed_weight 0) they alternate."""

    def learned(weight: float) -> tuple[list[str], dict[str, float | None]]:
        cfg = FleetConfig.model_validate({"router": {"speed_weight": weight}})
        fleet = Fleet(cfg, [A, B])
        assert [fleet.route(w, RouteRequest(100), 0.0) for w in ("wa", "wb")] == [A, B]
        for rid, tpot in (("wa", 0.02), ("wb", 0.01)):
            fleet.on_first_token(rid, 1.0)
            fleet.on_finish(rid, 1.0 + 100 * tpot, 101)
            fleet.on_done(rid, 3.0)
        picks = [fleet.route(f"r{i}", RouteRequest(100), 4.0) or "" for i in range(9)]
        return picks, {s.url: s.seconds_per_token for s in fleet.stats(4.0)}

    picks, pace = learned(0.1)
    assert pace == pytest.approx({A: 0.02, B: 0.01})  # exported per backend
    assert picks.count(B) == 6 and picks.count(A) == 3, picks
    picks, pace = learned(0.0)
    assert pace == {A: None, B: None} and picks.count(B) in (4, 5)  # turns, by tokens
