"""GatewayCore in virtual time: ordering, admission caps, eviction, config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from burstguard.errors import UserError
from burstguard.gateway.config import AdmissionConfig, GatewayConfig
from burstguard.gateway.core import GatewayCore
from burstguard.gateway.request import GatewayRequest


def req(i: int, cls: str, t: float = 0.0, prompt: int = 100, out: int = 50) -> GatewayRequest:
    return GatewayRequest(f"r{i}", t, prompt, out, priority_class=cls, tenant="t")


def core(**admission: object) -> GatewayCore:
    config = GatewayConfig(admission=AdmissionConfig(adapt=False, min_in_flight=1, **admission))  # type: ignore[arg-type]
    return GatewayCore(config)


def test_interactive_is_released_before_batch() -> None:
    gw = core(max_in_flight=1)
    for i, cls in enumerate(["batch", "batch", "interactive", "batch", "interactive"]):
        assert gw.submit(req(i, cls, t=i * 0.01), now=i * 0.01).accepted
    order: list[str] = []
    now = 1.0
    for _ in range(5):
        released = gw.dispatch(now)
        assert len(released) <= 1  # the in-flight cap holds
        order += [r.id for r in released]
        for r in released:
            gw.on_first_token(r.id, now)
            gw.on_finish(r.id, now, 50)
        now += 0.01
    assert order[:2] == ["r2", "r4"]  # both interactive first, in arrival order
    assert sorted(order) == [f"r{i}" for i in range(5)]


def test_every_request_is_counted_once() -> None:
    gw = core(max_in_flight=4)
    for i in range(6):
        gw.submit(req(i, "standard"), 0.0)
    released = gw.dispatch(0.0)
    assert len(released) == 4
    gw.on_finish(released[0].id, 0.5, 10)
    gw.cancel(released[1].id, 0.5)
    assert gw.cancel("r5", 0.5)  # still queued: dropped
    assert not gw.cancel("r5", 0.6)  # not twice
    stats = gw.stats
    assert stats.in_flight_requests == 2
    assert stats.queue_depth.get("standard", 0) == 1


def test_full_queue_evicts_lowest_class_newest_first() -> None:
    gw = core(max_queue_requests=3, max_in_flight=1)
    gw.submit(req(0, "batch", 0.0), 0.0)
    gw.submit(req(1, "batch", 0.1), 0.1)
    gw.submit(req(2, "standard", 0.2), 0.2)
    admission = gw.submit(req(3, "interactive", 0.3), 0.3)
    assert admission.accepted
    assert [r.id for r in admission.evicted] == ["r1"]
    last = gw.submit(req(4, "batch", 0.4), 0.4)
    assert not last.accepted and last.reason == "queue_full"
    assert last.retry_after_s is not None and last.retry_after_s > 0


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("admission:\n  max_queue_requests: 0\n")
    with pytest.raises(UserError, match=r"admission\.max_queue_requests"):
        GatewayConfig.load(path)
