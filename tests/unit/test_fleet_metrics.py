"""Per-backend metrics with a `backend` label (a name, not a URL), rendered and parsed back."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from burstguard.core.fleet.config import FleetConfig, HealthConfig, RedisConfig
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.names import BackendNames
from burstguard.core.fleet.router import RouteRequest
from burstguard.core.fleet.state import BackendState
from burstguard.live.gateway.fleet_metrics import FleetCollector
from burstguard.live.gateway.shared_state import SharedState
from burstguard.scrape import parse_metrics

A, B = "http://a:1", "http://b:1"


async def test_backend_labelled_metrics() -> None:
    fleet = Fleet(FleetConfig(health=HealthConfig(open_s=1.0)), [A, B])  # open at t=2
    fleet.on_metrics(A, BackendState(0, 0, 0.1), 1.0)
    fleet.route("r1", RouteRequest(50), 1.0)
    first = fleet.backend_of("r1")
    assert first is not None
    fleet.on_failure("r1", "connect", 1.1)
    for t in (1.2, 1.3, 1.4):
        fleet.on_probe(first, False, t)
    shared = SharedState(RedisConfig(url="redis://127.0.0.1:1/0"), "gw")  # never contacted
    registry = CollectorRegistry()
    names = BackendNames([(A, None), (B, "b-east")])
    registry.register(FleetCollector(fleet, lambda: 2.0, shared, names))
    text = generate_latest(registry).decode()
    assert "http://" not in text  # the labels are names: no address
    m = parse_metrics(text)
    other = names(B if first == A else A)
    first = names(first)
    assert {first, other} == {"backend-0", "b-east"}
    assert m[f'burstguard_backend_circuit_state{{backend="{first}"}}'] == 2
    assert m[f'burstguard_backend_healthy{{backend="{other}"}}'] == 1
    assert m[f'burstguard_backend_up{{backend="{first}"}}'] == 0
    assert m[f'burstguard_backend_in_flight{{backend="{other}"}}'] == 1
    assert m[f'burstguard_backend_in_flight_tokens{{backend="{other}"}}'] == 50
    assert m[f'burstguard_backend_routed_total{{backend="{first}"}}'] == 1
    assert m[f'burstguard_backend_failovers_total{{backend="{first}"}}'] == 1
    assert m[f'burstguard_backend_failures_total{{backend="{first}",reason="connect"}}'] == 1
    assert m['burstguard_backend_metrics_age_seconds{backend="backend-0"}'] == 1.0
    assert 'burstguard_backend_metrics_age_seconds{backend="b-east"}' not in m
    assert m['burstguard_failover_outcomes_total{outcome="failover"}'] == 1
    assert m["burstguard_ready_backends"] == 1
    assert m["burstguard_shared_state_degraded"] == 0
    await shared.close()
