"""Tenant quotas: the token-bucket arithmetic (hypothesis), the rules, the config errors
and the core's answers (Reject with an exact Retry-After, settlement at the end)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstguard.errors import ConfigError
from burstguard.gateway.config import BackendConfig, GatewayConfig, QuotaConfig, QuotaLimit
from burstguard.gateway.core import GatewayCore
from burstguard.gateway.events import Arrive, Cancel, Finish, Reject, Release, Settle, Tick
from burstguard.gateway.quota import Bucket, BucketCharge, Quotas, Verdict, give, key_id, take
from burstguard.gateway.request import GatewayRequest
from burstguard.wire.outcomes import Reason

BACKEND = ({"url": "http://a:1"},)


# -- the arithmetic -----------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.floats(0.0, 5.0),  # time step
        st.sampled_from(["take", "refund", "overdraw"]),
        st.floats(0.0, 150.0),  # cost, or the share of an outstanding charge given back
        st.floats(0.0, 1.0),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(per_s=st.floats(0.5, 50.0), burst=st.floats(1.0, 200.0), seq=ops)
def test_no_admission_beyond_burst_plus_rate_times_time(
    per_s: float, burst: float, seq: list[tuple[float, str, float, float]]
) -> None:
    """Any interval [a, b]: admitted - refunded in it <= burst + rate x (b - a), for any
    sequence of charges, refunds (each of part of an earlier charge) and overdraws."""
    charge = BucketCharge("b", "tokens", per_s, burst, 0.0)
    bucket = Bucket(burst, 0.0)
    now = 0.0
    events: list[tuple[float, float]] = []  # (time, +admitted / -refunded)
    outstanding: list[float] = []  # what each admitted charge may still get back
    for dt, op, x, frac in seq:
        now += dt
        if op == "take":
            c = BucketCharge("b", "tokens", per_s, burst, x)
            v = take([bucket], [c], now)
            if v.admitted:
                events.append((now, x))
                outstanding.append(x)
            else:
                assert v.wait_s > 0
                if math.isfinite(v.wait_s):  # exact: admitted after exactly that wait
                    probe = Bucket(bucket.level, bucket.at)
                    assert take([probe], [c], now + v.wait_s).admitted
                    early = Bucket(bucket.level, bucket.at)
                    assert not take([early], [c], now + v.wait_s * 0.999 - 1e-6).admitted
                else:
                    assert x > burst
        elif op == "refund" and outstanding:
            back = outstanding[-1] * frac
            outstanding[-1] -= back
            give(bucket, charge, back, now)
            events.append((now, -back))
        elif op == "overdraw":
            give(bucket, charge, -x * frac, now)  # output past a reservation: never admitted
        assert bucket.level <= burst + 1e-9
    for i, (a, _) in enumerate(events):
        net = 0.0
        for b, amount in events[i:]:
            net += amount
            assert net <= burst + per_s * (b - a) + 1e-6 * (1 + burst), (a, b, net)


def test_a_bucket_refuses_until_exactly_its_refill() -> None:
    c = BucketCharge("b", "tokens", 10.0, 100.0, 60.0)
    b = Bucket(100.0, 0.0)
    assert take([b], [c], 0.0).admitted  # 40 left
    v = take([b], [c], 0.0)
    assert not v.admitted and v.wait_s == pytest.approx(2.0)
    assert v.limits["tokens"].remaining == 40 and v.limits["tokens"].reset_s == pytest.approx(6)
    assert take([b], [c], 2.0).admitted


def test_both_buckets_or_neither() -> None:
    r = BucketCharge("r", "requests", 1.0, 1.0, 1.0)
    t = BucketCharge("t", "tokens", 10.0, 100.0, 200.0)  # more than the burst: never
    br, bt = Bucket(1.0, 0.0), Bucket(100.0, 0.0)
    v = take([br, bt], [r, t], 0.0)
    assert not v.admitted and math.isinf(v.wait_s) and v.refused_by == "tokens"
    assert br.level == 1.0  # the request bucket was not charged either


# -- rules and config ---------------------------------------------------------------------


def _req(
    i: int, tenant: str = "acme", prompt: int = 100, out: int | None = 100,
    t: float = 0.0, cls: str = "standard", key: str | None = None,
) -> GatewayRequest:  # fmt: skip
    return GatewayRequest(f"r{i}", t, prompt, out, cls, tenant, key_id=key)


def test_the_most_specific_rule_applies() -> None:
    from burstguard.gateway.config import ApiKeyConfig

    k = ApiKeyConfig(key="k" * 12, tenant="acme", tier="standard",
                     quota=QuotaLimit(requests_per_second=5))  # fmt: skip
    cfg = QuotaConfig(
        default=QuotaLimit(tokens_per_minute=600),
        tenants={"acme": QuotaLimit(tokens_per_second=50, burst_tokens=500)},
        classes={"batch": QuotaLimit(requests_per_minute=6)},
    )
    q = Quotas(cfg, [k], 1024)
    assert q.rule(_req(0, key=key_id("k" * 12))) == ("k:" + key_id("k" * 12), k.quota)
    assert q.rule(_req(0))[0] == "t:acme"  # type: ignore[index]
    assert q.rule(_req(0, tenant="bob", cls="batch"))[0] == "c:batch:bob"  # type: ignore[index]
    plan = q.plan(_req(0, tenant="bob", out=None))
    assert plan is not None and plan.charges[0].cost == 100 + 1024  # the reserve
    assert plan.charges[0].per_s == 10 and plan.charges[0].burst == 600


@pytest.mark.parametrize(
    ("quotas", "message"),
    [
        ({"default": {}}, "a request rate or a token rate"),
        ({"default": {"tokens_per_second": 1, "tokens_per_minute": 60}}, "not both"),
        ({"default": {"burst_tokens": 10}}, "burst_tokens needs"),
        ({"default": {"tokens_per_minute": -1}}, "quotas.default.tokens_per_minute"),
        ({"classes": {"gold": {"tokens_per_minute": 10}}}, "'gold' is not one of"),
        ({"tenants": {"a": {"tokens_per_hour": 10}}}, "tokens_per_hour"),
    ],
)
def test_bad_quota_config_is_named(quotas: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GatewayConfig.from_dict({"backends": BACKEND, "quotas": quotas})


# -- the core -----------------------------------------------------------------------------


def _core(**quotas: object) -> GatewayCore:
    cfg = GatewayConfig(
        backends=(BackendConfig(url="http://a:1"),),
        quotas=QuotaConfig.model_validate(quotas),
    )
    return GatewayCore(cfg)


def test_over_quota_is_a_reject_with_the_exact_wait_and_a_retry_at_it_is_admitted() -> None:
    gw = _core(tenants={"acme": {"tokens_per_second": 100, "burst_tokens": 300}})
    out = gw.handle(Arrive(_req(0, prompt=100, out=100)), 0.0)  # 200 of 300
    rel = [e for e in out if isinstance(e, Release)]
    assert rel and rel[0].quota is not None and rel[0].quota.limits["tokens"].remaining == 100
    out = gw.handle(Arrive(_req(1, prompt=100, out=100)), 0.0)
    rej = [e for e in out if isinstance(e, Reject)]
    assert rej and rej[0].reason == Reason.QUOTA and rej[0].retry_after_s == pytest.approx(1.0)
    assert gw.stats.rejections[Reason.QUOTA] == 1
    early = gw.handle(Arrive(_req(2, prompt=100, out=100, t=0.99)), 0.99)
    assert [e for e in early if isinstance(e, Reject)]
    at = gw.handle(Arrive(_req(3, prompt=100, out=100, t=1.0)), 1.0)
    assert not [e for e in at if isinstance(e, Reject)]  # waited exactly: admitted
    # another tenant (no rule) is never refused
    assert not [e for e in gw.handle(Arrive(_req(4, tenant="bob")), 1.0) if isinstance(e, Reject)]


def test_settlement_gives_back_unused_output_and_charges_a_cancel_what_it_used() -> None:
    gw = _core(tenants={"acme": {"tokens_per_second": 1, "burst_tokens": 1000}})
    gw.handle(Arrive(_req(0, prompt=100, out=400)), 0.0)  # 500 charged
    gw.handle(Finish("r0", 100), 0.0)  # used 200: 300 back -> 800 left
    gw.handle(Arrive(_req(1, prompt=100, out=400)), 0.0)  # 300 left
    gw.handle(Cancel("r1", output_tokens=50), 0.0)  # used 150: 350 back -> 650
    out = gw.handle(Arrive(_req(2, prompt=100, out=550)), 0.0)  # 650: fits exactly
    assert not [e for e in out if isinstance(e, Reject)]
    out = gw.handle(Arrive(_req(3, prompt=1, out=0)), 0.0)
    assert [e for e in out if isinstance(e, Reject)]


def test_a_request_the_gateway_sheds_is_refunded_whole() -> None:
    cfg = GatewayConfig(
        backends=(BackendConfig(url="http://a:1"),),
        admission={"max_queue_requests": 1, "max_in_flight": 1, "min_in_flight": 1,
                   "adapt": False},  # type: ignore[arg-type]
        quotas=QuotaConfig(tenants={"acme": QuotaLimit(requests_per_second=0.001,
                                                       burst_requests=3)}),
    )  # fmt: skip
    gw = GatewayCore(cfg)
    gw.handle(Arrive(_req(0)), 0.0)  # in flight
    gw.handle(Arrive(_req(1)), 0.0)  # queued
    shed = [e for e in gw.handle(Arrive(_req(2)), 0.0) if isinstance(e, Reject)]
    assert shed and shed[0].reason == Reason.QUEUE_FULL  # refunded: 1 request left
    gw.handle(Tick(), 0.0)
    gw.handle(Finish("r0", 10), 0.0)
    assert not [e for e in gw.handle(Arrive(_req(3)), 0.0) if isinstance(e, Reject)]


def test_a_shared_verdict_is_taken_and_settled_by_an_effect() -> None:
    gw = _core(default={"tokens_per_second": 10})
    plan = gw.quota_plan(_req(0))
    assert plan is not None
    ok = Verdict(True, shared=True)
    out = gw.handle(Arrive(_req(0), quota=ok), 0.0)
    assert [e for e in out if isinstance(e, Release)]
    out = gw.handle(Finish("r0", 30), 0.0)
    settles = [e for e in out if isinstance(e, Settle)]
    assert len(settles) == 1 and settles[0].amounts[0][1] == 70.0  # 100 reserved, 30 used
    refused = Verdict(False, 3.5, "tokens", shared=True)
    rej = [e for e in gw.handle(Arrive(_req(1), quota=refused), 0.0) if isinstance(e, Reject)]
    assert rej and rej[0].retry_after_s == 3.5


def test_a_replica_alone_enforces_its_share() -> None:
    gw = _core(default={"tokens_per_second": 30, "burst_tokens": 600})
    admitted = 0
    for i in range(20):  # 100 tokens each, at once: a third of 600 is 200
        out = gw.handle(Arrive(_req(i, prompt=50, out=50), quota_share=3), 0.0)
        admitted += not [e for e in out if isinstance(e, Reject)]
    assert admitted == 2


def test_local_buckets_are_bounded() -> None:
    gw = _core(default={"requests_per_second": 1, "burst_requests": 1}, max_buckets=16)
    for i in range(40):  # distinct tenants from a header: at most max_buckets (16) + overflow
        gw.handle(Arrive(_req(i, tenant=f"t{i}")), 0.0)
        gw.handle(Finish(f"r{i}", 1), 0.0)
    assert gw.stats.quota_buckets <= 17
