"""Quotas in `burstguard sim --gateway`: the core's buckets, in virtual time.

A client that waits exactly the Retry-After it was told is admitted; the summary reports
per tenant what was admitted and what the quota refused; `diagnose` names the tenant.
"""

from __future__ import annotations

from burstguard.diagnose.cli import render
from burstguard.diagnose.run import RunData
from burstguard.diagnose.walk import diagnose
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.sim.gateway_loop import gateway_summary, simulate_gateway
from burstguard.workload.spec import RequestSpec, Workload

H100 = Profile.load("llama3-8b-h100")
ENGINE = EngineConfig(max_num_seqs=64)
CONFIG = GatewayConfig.from_dict(
    {
        "backends": [{"url": "http://sim:1"}],
        "quotas": {"tenants": {"heavy": {"tokens_per_second": 1000, "burst_tokens": 2000}}},
    }
)


def _specs(extra: list[RequestSpec]) -> Workload:
    """heavy: 4 requests of 600 tokens at t=1 (the burst holds 3); light: no quota."""
    specs = [RequestSpec(f"h{i}", 1.0, 500, 100, "standard", "heavy") for i in range(4)]
    specs += [RequestSpec(f"l{i}", 1.0 + i * 0.1, 500, 100, "standard", "light") for i in range(5)]
    return Workload.from_specs(specs + extra)


def test_the_sim_admits_a_client_that_waits_exactly_the_retry_after() -> None:
    first = simulate_gateway(_specs([]), ENGINE, H100, CONFIG)
    refused = [r for r in first.records if r.status == 429]
    assert [r.id for r in refused] == ["h3"] and refused[0].error == "quota_exceeded"
    wait = refused[0].retry_after_s
    assert wait is not None and 0 < wait <= 0.6 + 1e-9  # 600 - (2000 - 1800), at 1000/s
    # the same run with h3's client coming back exactly then, and once a little earlier
    on_time = RequestSpec("h3-retry", 1.0 + wait, 500, 100, "standard", "heavy")
    again = simulate_gateway(_specs([on_time]), ENGINE, H100, CONFIG)
    assert {r.id: r.status for r in again.records}["h3-retry"] == 200
    early = RequestSpec("h3-early", 1.0 + wait * 0.9, 500, 100, "standard", "heavy")
    too_soon = simulate_gateway(_specs([early]), ENGINE, H100, CONFIG)
    assert {r.id: r.status for r in too_soon.records}["h3-early"] == 429


def test_the_summary_reports_tenants_and_diagnose_names_the_one_over_quota() -> None:
    specs = [RequestSpec(f"h{i}", i * 0.05, 500, 100, "standard", "heavy") for i in range(100)]
    specs += [RequestSpec(f"l{i}", i * 0.5, 500, 100, "standard", "light") for i in range(10)]
    result = simulate_gateway(Workload.from_specs(specs), ENGINE, H100, CONFIG)
    block = gateway_summary(result, CONFIG)
    tenants = block["quota"]["tenants"]
    assert next(iter(tenants)) == "heavy"  # the most refused first
    heavy, light = tenants["heavy"], tenants["light"]
    assert heavy["refused_requests"] > 0 and light["refused_requests"] == 0
    assert light["admitted_requests"] == 10
    # heavy offered 600 tokens every 50 ms for 5 s: 2000 + 1000 x 5 may pass
    assert heavy["admitted_requests"] * 600 <= 2000 + 1000 * 5 + 600
    assert block["rejections"]["quota_exceeded"] == heavy["refused_requests"]
    summary = {"source": "sim", "requests": len(specs), "retries": 0, "gateway": block}
    d = diagnose(RunData.from_summary("sim", summary, result.records))
    assert d.over_quota[0]["tenant"] == "heavy"
    assert d.over_quota[0]["share_of_429"] == 1.0
    assert "over quota: tenant 'heavy'" in render(d)
