"""Classification is one rule (`gateway.classify`) for the live gateway and the simulator:
key tier, then class header, then vLLM `priority`, then the default class; a class header
naming no class is refused (400) in both, not served as the default."""

from __future__ import annotations

from typing import Any

import pytest

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.gateway.api import CompletionRequest
from burstguard.gateway.auth import Identity
from burstguard.gateway.classify import Classifier, UnknownClass
from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.server import Gateway
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import RequestSpec, Workload

# the default classes: interactive (rank 0), standard (1), batch (2)
CONFIG = GatewayConfig.from_dict({
    "backends": [{"url": "http://127.0.0.1:8000"}],
    "api_keys": [{"key": "key-batch-123", "tenant": "acme", "tier": "batch"}],
    "default_class": "standard",
})  # fmt: skip

# (key tier, class header, priority) -> class, best rule first
CASES: list[tuple[tuple[str | None, str | None, int | None], str]] = [
    (("batch", "interactive", 0), "batch"),  # the key's tier wins over all
    ((None, "interactive", 2), "interactive"),  # then the header, over priority
    ((None, None, 1), "standard"),  # then priority: the best class of rank >= it
    ((None, None, 7), "batch"),  # past every rank: the worst class
    ((None, None, None), "standard"),  # then the default
]


def live_class(gw: Gateway, tier: str | None, named: str | None, priority: int | None) -> str:
    ident = None if tier is None else Identity("acme", tier)
    headers = {} if named is None else {"x-burstguard-class": named}
    body: dict[str, Any] = {"model": "m", "prompt": "hi"}
    if priority is not None:
        body["priority"] = priority
    cls, _ = gw._classify(ident, headers, CompletionRequest.model_validate(body))
    return cls


@pytest.mark.parametrize(("given", "want"), CASES)
def test_the_live_gateway_and_the_rule_rank_tier_header_priority_default(
    given: tuple[str | None, str | None, int | None], want: str
) -> None:
    assert Classifier(CONFIG).classify(*given) == want
    assert live_class(Gateway(CONFIG), *given) == want


def test_the_sim_refuses_an_unknown_class_by_name_as_the_live_gateway_does() -> None:
    """`gold` is no class: live answers 400 invalid_request naming it (bench records
    http_400); the simulator wrote the request as served in the default class."""
    with pytest.raises(UnknownClass, match=r"x-burstguard-class: 'gold' is not one of batch"):
        live_class(Gateway(CONFIG), None, "gold", None)
    specs = [RequestSpec(f"r{i}", i * 0.5, 200, 16, cls) for i, cls in
             enumerate(["interactive", "gold", None, "batch"])]  # fmt: skip
    result = simulate_gateway(
        Workload.from_specs(specs), EngineConfig(), Profile.load("llama3-8b-h100"), CONFIG
    )
    got = {r.id: (r.priority_class, r.status, r.error) for r in result.records}
    assert got == {
        "r0": ("interactive", 200, None),
        "r1": ("gold", 400, "http_400"),
        "r2": ("standard", 200, None),
        "r3": ("batch", 200, None),
    }
    assert result.gateway is not None
    assert sum(n for c in result.gateway.outcomes.values() for n in c.values()) == 3
