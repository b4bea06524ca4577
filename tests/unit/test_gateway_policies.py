"""The gateway's parts on their own: fairness shares (VTC, DRR), SPJF order, the output
predictor, the service rate and the adaptive in-flight caps."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from burstguard.gateway.admission import InFlightLimits, ServiceRate
from burstguard.gateway.config import AdmissionConfig, GatewayConfig, PredictorConfig
from burstguard.gateway.core import GatewayCore
from burstguard.gateway.events import Release
from burstguard.gateway.predictor import OutputPredictor
from burstguard.gateway.request import BackendState, GatewayRequest


def one_at_a_time(fairness: str, order: str = "fcfs", n: int = 40) -> list[GatewayRequest]:
    """Tenant `heavy` queues 30 requests of 1000 tokens, then `light` 200 of 100; one slot;
    each finishes with its predicted output. The dispatch order of the first `n`."""
    config = GatewayConfig.from_dict({
        "policy": {"fairness": fairness, "order": order, "drr_quantum_tokens": 500},
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False},
    })  # fmt: skip
    gw = GatewayCore(config)
    k = 0
    for tenant, prompt, count in (("heavy", 900, 30), ("light", 50, 200)):
        for _ in range(count):
            gw.submit(GatewayRequest(f"r{k}", 0.0, prompt, 100 if tenant == "heavy" else 50,
                                     "standard", tenant), 0.0)  # fmt: skip
            k += 1
    out: list[GatewayRequest] = []
    now = 0.0
    while len(out) < n:
        released = [e.req for e in gw.dispatch(now) if isinstance(e, Release)]
        assert len(released) == 1
        r = released[0]
        out.append(r)
        now += 0.01
        gw.on_finish(r.id, now, r.max_tokens or 0)
    return out


def served_tokens(reqs: list[GatewayRequest]) -> Counter[str]:
    c: Counter[str] = Counter()
    for r in reqs:
        c[r.tenant or ""] += r.prompt_tokens + (r.max_tokens or 0)
    return c


def test_without_fairness_the_first_tenant_takes_everything() -> None:
    assert served_tokens(one_at_a_time("none"))["light"] == 10 * 100  # only after heavy's 30


@pytest.mark.parametrize("fairness", ["vtc", "drr"])
def test_fairness_gives_backlogged_tenants_equal_token_shares(fairness: str) -> None:
    """Both tenants stay backlogged over the first 40 dispatches: each gets ~half of the
    tokens served (within one heavy request), whatever its request sizes."""
    got = served_tokens(one_at_a_time(fairness))
    assert got["light"] > 0 and got["heavy"] > 0
    assert abs(got["heavy"] - got["light"]) <= 1000 + 500, got


def test_spjf_serves_the_shortest_predicted_job_first_and_ages() -> None:
    config = GatewayConfig.from_dict({
        "policy": {"order": "spjf", "spjf_aging_tokens_per_s": 100.0},
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False},
    })  # fmt: skip
    gw = GatewayCore(config)
    lengths = {"long-old": (0.0, 1000), "mid": (5.0, 400), "short": (5.0, 50), "long": (5.0, 1000)}
    for rid, (t, out) in lengths.items():
        gw.submit(GatewayRequest(rid, t, 10, out, "standard", "t"), 5.0)
    order = []
    for k in range(4):
        (r,) = [e.req for e in gw.dispatch(6.0 + k) if isinstance(e, Release)]
        order.append(r.id)
        gw.on_finish(r.id, 6.0 + k, r.max_tokens or 0)
    # long-old waited 5 s more: 500 tokens of aging put it before "long" but after "mid"
    assert order == ["short", "mid", "long-old", "long"]


def test_predictor_learns_per_class_and_falls_back_until_trusted() -> None:
    p = OutputPredictor(PredictorConfig(min_samples=5, default_fraction=1.0))
    for _ in range(4):
        p.observe(1000, 500, "interactive", "t", "/chat", 250)
    assert p.predict(1000, 500, "interactive", "t", "/chat") == 1000  # 4 < min_samples
    p.observe(1000, 500, "interactive", "t", "/chat", 250)
    for _ in range(20):
        p.observe(1000, 500, "batch", "t", "/chat", 1000)
    assert p.predict(1000, 500, "interactive", "t", "/chat") == 250
    assert p.predict(1000, 500, "batch", "t", "/chat") == 1000
    # an unseen tenant of a known class takes its class's history, not the global mix
    assert p.predict(1000, 500, "interactive", "other", "/chat") == 250
    # an unseen class takes everyone's: between the two
    assert 250 < p.predict(1000, 500, "standard", "t", "/chat") < 1000


def test_service_rate_is_measured_over_saturated_time_only() -> None:
    rate = ServiceRate(half_life_s=5.0, prior=None)
    now = 0.0
    for _ in range(100):  # idle: 1000 tokens/s finishing but nothing queued -> no sample
        now += 0.1
        rate.observe(now, saturated=False)
        rate.on_finish(now, 100.0)
    assert rate.rate is None
    for _ in range(50):  # a backlog: 2000 tokens/s finish
        now += 0.1
        rate.observe(now, saturated=True)
        rate.on_finish(now, 200.0)
    assert rate.rate == pytest.approx(2000.0, rel=0.1)


def test_in_flight_caps_shrink_to_what_the_engine_runs_and_grow_when_calm() -> None:
    cfg = AdmissionConfig(max_in_flight=64, min_in_flight=4, max_in_flight_tokens=100_000,
                          grow_fraction=0.1)  # fmt: skip
    lim = InFlightLimits(cfg, interval_s=0.25)
    queued = BackendState(waiting=10, running=24, kv_usage=0.5)
    lim.observe(0.0, queued, 40, 40_000)
    assert lim.requests == 64  # one scrape with a queue is not enough
    lim.observe(0.25, queued, 40, 40_000)
    assert lim.requests == 24  # the engine runs 24 at once
    assert lim.tokens == pytest.approx(40_000 * 24 / 40)
    calm = BackendState(waiting=0, running=24, kv_usage=0.5)
    lim.observe(0.5, calm, 24, 24_000)
    assert lim.requests == 24  # calm, but the cap held nothing back: no growth
    lim.bound = True
    lim.observe(0.75, calm, 24, 24_000)
    assert lim.requests == pytest.approx(24 * 1.1 + 1)
    full = BackendState(waiting=0, running=24, kv_usage=0.97)
    lim.observe(1.0, full, 20, 20_000)
    assert lim.requests == math.floor(20 * 0.9)  # KV above kv_high: shrink by grow_fraction
