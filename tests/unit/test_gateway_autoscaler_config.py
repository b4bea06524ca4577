"""The gateway's `autoscaler:` block: a preset, a policy file, or a policy inline (what the
fleet-predictive overlay ships); a bad one is refused at load, naming the field."""

from __future__ import annotations

import pytest

from burstguard.autoscale import load_policy
from burstguard.errors import BurstguardError
from burstguard.gateway.config import GatewayConfig

BACKENDS = [{"url": "http://127.0.0.1:1"}]


def test_an_inline_policy_is_read_with_its_own_fields() -> None:
    inline = load_policy("predictive").model_dump(mode="json")
    inline["predictive"]["rate_per_replica"] = 7.0
    cfg = GatewayConfig.from_dict({"backends": BACKENDS, "autoscaler": {"policy": inline}})
    assert cfg.autoscaler is not None
    policy = cfg.autoscaler.scaling_policy()
    assert policy.kind == "predictive"
    assert policy.predictive is not None and policy.predictive.rate_per_replica == 7.0


def test_a_preset_takes_the_overrides() -> None:
    cfg = GatewayConfig.from_dict(
        {"backends": BACKENDS, "autoscaler": {"policy": "kpa", "max_replicas": 3}}
    )
    assert cfg.autoscaler is not None and cfg.autoscaler.scaling_policy().max_replicas == 3


@pytest.mark.parametrize(
    ("policy", "message"),
    [("nope", "no such preset"), ({"kind": "predictive", "bogus": 1}, "bogus")],
)
def test_a_bad_policy_is_refused_naming_it(policy: object, message: str) -> None:
    with pytest.raises(BurstguardError, match=message):
        GatewayConfig.from_dict({"backends": BACKENDS, "autoscaler": {"policy": policy}})
