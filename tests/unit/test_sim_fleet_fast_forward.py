"""The fleet simulation's decode fast-forward (`sim.replicas`) changes nothing a user can
see: a replica's planned run of decode steps, cut short whenever the gateway releases a
request to it, preempts one of its requests or scrapes it, gives the same records, step
count, end time, routing, gateway counters and scaling books as stepping one at a time."""

from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import REPO_ROOT

from burstguard.autoscale import load_policy
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.sim.defaults import fleet_gateway
from burstguard.sim.gateway_loop import GatewaySimResult, simulate_gateway
from burstguard.workload.synth import PatternSpec, synthesize

H100 = Profile.load("llama3-8b-h100")


def workload(pattern: str, rate: float, seed: int, classes: str | None = None):  # type: ignore[no-untyped-def]
    spec = PatternSpec(
        pattern=pattern, rate=rate, duration_s=40, seed=seed, burstiness=0.25,
        prompt_tokens="lognormal:mean=600,sigma=0.8", output_tokens="lognormal:mean=150,sigma=0.8",
        **({"classes": classes} if classes else {}),
    )  # fmt: skip
    return synthesize(spec)


def both(**kwargs: Any) -> tuple[GatewaySimResult, GatewaySimResult]:
    single = simulate_gateway(**kwargs, fast_forward=False)
    fast = simulate_gateway(**kwargs, fast_forward=True)
    return single, fast


def assert_same(single: GatewaySimResult, fast: GatewaySimResult) -> None:
    assert fast.records == single.records
    assert (fast.steps, fast.preemptions, fast.end_s) == (
        single.steps, single.preemptions, single.end_s,
    )  # fmt: skip
    assert fast.routed == single.routed
    assert fast.gateway == single.gateway
    assert fast.reprefill_tokens == single.reprefill_tokens
    assert fast.scaling == single.scaling


@pytest.mark.parametrize(("pattern", "rate", "seed"), [("gamma", 60.0, 1), ("poisson", 25.0, 2)])
def test_a_fixed_fleet_gives_the_same_results(pattern: str, rate: float, seed: int) -> None:
    single, fast = both(
        workload=workload(pattern, rate, seed), engine=EngineConfig(max_num_seqs=48),
        profile=H100, gateway=fleet_gateway(4), replicas=4,
    )  # fmt: skip
    assert sum(r.ok for r in single.records) > 1000
    assert_same(single, fast)


def test_gateway_preemption_and_shedding_give_the_same_results() -> None:
    """The example gateway config preempts batch requests for interactive ones and sheds:
    aborts and resumed requests land in the middle of planned runs."""
    single, fast = both(
        workload=workload("burst", 40.0, 3, "interactive=0.2,standard=0.2,batch=0.6"),
        engine=EngineConfig(max_num_seqs=32), profile=H100,
        gateway=GatewayConfig.load(REPO_ROOT / "examples" / "gateway.yaml"), replicas=2,
    )  # fmt: skip
    assert single.gateway is not None and sum(single.gateway.preemptions.values()) > 0
    assert_same(single, fast)


def test_an_autoscaled_fleet_gives_the_same_results() -> None:
    scaling = load_policy("kpa").with_overrides(max_replicas=6, cold_start_s=10.0)
    single, fast = both(
        workload=workload("gamma", 50.0, 4), engine=EngineConfig(max_num_seqs=32),
        profile=H100, gateway=fleet_gateway(6), replicas=1, scaling=scaling,
    )  # fmt: skip
    assert single.scaling is not None and len(single.scaling["scale_events"]) >= 2
    assert_same(single, fast)
