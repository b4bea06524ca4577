"""GatewayCore in virtual time: ordering, admission caps, eviction, config errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import orjson
import pytest
from tests.gateway_driver import queue, rejects, releases, unlisted

from burstguard.errors import BurstguardError
from burstguard.gateway.admission import ClassInflow, estimate_wait
from burstguard.gateway.cli import load_config
from burstguard.gateway.config import AdmissionConfig, BackendConfig, ClassConfig, GatewayConfig
from burstguard.gateway.core import GatewayCore
from burstguard.gateway.events import Arrive, Cancel, Finish, FirstToken, Tick
from burstguard.gateway.request import GatewayRequest
from burstguard.wire.outcomes import Outcome, Reason
from burstguard.workload import seed


def req(i: int, cls: str, t: float = 0.0, prompt: int = 100, out: int = 50) -> GatewayRequest:
    return GatewayRequest(f"r{i}", t, prompt, out, priority_class=cls, tenant="t")


BACKEND = (BackendConfig(url="http://a:1"),)


def released(gw: GatewayCore, now: float) -> list[GatewayRequest]:
    """What the core releases now (a tick)."""
    return releases(gw.handle(Tick(), now))


def core(**admission: object) -> GatewayCore:
    adm = AdmissionConfig(adapt=False, min_in_flight=1, **admission)  # type: ignore[arg-type]
    return GatewayCore(GatewayConfig(backends=BACKEND, admission=adm))


def test_interactive_is_released_before_batch() -> None:
    gw = core(max_in_flight=1)
    classes = ["batch", "batch", "interactive", "batch", "interactive"]
    assert queue(gw, [req(i, cls, t=i * 0.01) for i, cls in enumerate(classes)]) == []
    order: list[str] = []
    now = 1.0
    out = released(gw, now)
    for _ in range(5):
        assert len(out) <= 1  # the in-flight cap holds
        order += [r.id for r in out]
        done, out = out, []
        for r in done:
            gw.handle(FirstToken(r.id), now)
            out += releases(gw.handle(Finish(r.id, 50), now))
        now += 0.01
    assert order[:2] == ["r2", "r4"]  # both interactive first, in arrival order
    assert sorted(order) == [f"r{i}" for i in range(5)]


def test_every_request_is_counted_once() -> None:
    gw = core(max_in_flight=4)
    queue(gw, [req(i, "standard") for i in range(6)], 0.0)
    out = released(gw, 0.0)
    assert len(out) == 4
    with unlisted(gw, 0.5):  # what ends frees its slot; nothing else is released
        gw.handle(Finish(out[0].id, 10), 0.5)
        gw.handle(Cancel(out[1].id), 0.5)
        gw.handle(Cancel("r5"), 0.5)
        assert gw.stats.outcomes["standard"]["cancelled"] == 2  # still queued: dropped
        gw.handle(Cancel("r5"), 0.6)
        assert gw.stats.outcomes["standard"]["cancelled"] == 2  # not twice
    stats = gw.stats
    assert stats.in_flight_requests == 2
    assert stats.queue_depth.get("standard", 0) == 1


def test_full_queue_evicts_lowest_class_newest_first() -> None:
    gw = core(max_queue_requests=3, max_in_flight=1)
    queue(gw, [req(0, "batch", 0.0), req(1, "batch", 0.1), req(2, "standard", 0.2)])
    admission = rejects(queue(gw, [req(3, "interactive", 0.3)]))
    assert [(r.req.id, r.reason) for r in admission] == [("r1", "evicted")]
    (last,) = rejects(queue(gw, [req(4, "batch", 0.4)]))
    assert last.req.id == "r4" and last.reason == "queue_full"
    assert last.retry_after_s is not None and last.retry_after_s > 0


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("admission:\n  max_queue_requests: 0\n")
    with pytest.raises(BurstguardError, match=r"admission\.max_queue_requests"):
        GatewayConfig.load(path)


def test_a_config_lists_several_backends_and_backend_flags_replace_them(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "backends:\n  - url: http://127.0.0.1:8000\n    resume: true\n"
        "  - url: http://127.0.0.1:8001\n"
    )
    cfg = load_config(path, None, None, None)
    assert cfg.backend_urls() == ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
    flags = ["http://127.0.0.1:9000", "http://127.0.0.1:9001", "http://127.0.0.1:9002"]
    cfg = load_config(path, flags, None, None)
    assert cfg.backend_urls() == tuple(flags)
    assert all(b.resume for b in cfg.backends)  # the first entry's settings carry over


def test_duplicate_backends_are_an_error_naming_both_places(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("backends:\n  - url: http://a:8000\n  - url: http://A:8000/\n")
    with pytest.raises(
        BurstguardError, match=r"backends\.1: 'http://A:8000/' is the same backend as backends\.0"
    ):
        load_config(path, None, None, None)
    with pytest.raises(BurstguardError, match=r"--backend 2: .* same backend as --backend 1"):
        load_config(None, ["http://x:1", "http://X:1/"], None, None)
    with pytest.raises(BurstguardError, match=r"--backend 2: 'x:1' is not an http"):
        load_config(None, ["http://x:1", "x:1"], None, None)
    with pytest.raises(BurstguardError, match=r"backends: no backend configured"):
        load_config(None, None, None, None)
    path.write_text("fleet:\n  redis:\n    url: http://r:6379\n")
    with pytest.raises(BurstguardError, match=r"fleet\.redis\.url: expected redis://"):
        load_config(path, ["http://x:1"], None, None)


def test_class_inflow_reads_true_from_a_cold_start() -> None:
    """100 work units/s admitted to rank 0: read at once (bias-corrected), not ramping up
    over the half-life; rank 0 itself sees no class above it."""
    inflow = ClassInflow(half_life_s=5.0)
    for k in range(31):
        inflow.add(k * 0.1, 0, 10.0)
        if k * 0.1 in (1.5, 3.0):
            assert inflow.above(k * 0.1, 1) == pytest.approx(100.0, rel=0.15)
    assert inflow.above(3.0, 0) == 0.0
    assert inflow.above(30.0, 1) < 10.0  # an idle class above fades with the half-life


def test_estimated_wait_counts_the_rate_higher_classes_take() -> None:
    assert estimate_wait(1000.0, 1000.0) == pytest.approx(1.0)
    assert estimate_wait(1000.0, 1000.0, inflow_above=500.0) == pytest.approx(2.0)
    assert estimate_wait(1000.0, 1000.0, inflow_above=990.0) == math.inf
    assert estimate_wait(0.0, 1000.0, inflow_above=990.0) == 0.0  # nothing ahead: it goes next


def test_batch_is_shed_at_once_while_interactive_takes_the_whole_rate() -> None:
    """The same batch request, behind the same queued work, is admitted when no class
    above is arriving and refused at once (429 deadline, a Retry-After) when interactive
    traffic takes ~the whole measured rate, instead of waiting to be shed later. (With
    aging, `max_wait_s`, the wait is bounded and the request is admitted.)"""

    classes = [
        ClassConfig(name="interactive", rank=0, queue_deadline_s=5.0),
        ClassConfig(name="batch", rank=1, queue_deadline_s=10.0),  # no aging to bound it
    ]
    admission = AdmissionConfig(
        adapt=False, min_in_flight=1, max_in_flight=1, initial_service_rate=1000.0
    )

    def scenario(interactive_inflow: bool) -> bool:
        gw = GatewayCore(GatewayConfig(backends=BACKEND, classes=classes, admission=admission,
                                       default_class="batch"))  # fmt: skip
        gw.handle(Arrive(req(0, "batch")), 0.0)  # the one in-flight slot is taken
        for i in range(1, 3):
            gw.handle(Arrive(req(i, "batch")), 0.0)  # 300 tokens ahead: 0.3 s at the full rate
        t = 0.0
        if interactive_inflow:  # 150 tokens every 0.15 s: the whole 1000 tokens/s
            for i in range(3, 23):
                t = i * 0.15
                assert not rejects(gw.handle(Arrive(req(i, "interactive", t)), t))
        decision = rejects(gw.handle(Arrive(req(99, "batch", t)), t))
        for d in decision:
            assert d.reason == "deadline" and d.retry_after_s >= 1.0
        return not decision

    assert scenario(interactive_inflow=False)
    assert not scenario(interactive_inflow=True)


def test_a_queued_request_expires_only_at_twice_its_deadline() -> None:
    gw = core(max_in_flight=1)
    gw.handle(Arrive(req(0, "interactive")), 0.0)  # released
    gw.handle(Arrive(req(1, "interactive")), 0.0)  # interactive: queue deadline 5 s
    assert rejects(gw.handle(Tick(), 7.5)) == []
    assert [r.req.id for r in rejects(gw.handle(Tick(), 10.1))] == ["r1"]


def test_the_backend_tokenizer_counts_prompts(tmp_path: Path, reference_tokenizer: Path) -> None:
    """`auto` counts a Chinese prompt for the reference model with its real tokenizer (the
    estimate would not match it exactly), other models by the estimate; a bad tokenizer
    path is refused at start."""
    from burstguard.gateway.api import CompletionRequest
    from burstguard.gateway.server import Gateway
    from burstguard.tokenizer import load_tokenizer
    from burstguard.wire.tokens import count_tokens

    prompt = seed.PROMPT
    backend = {"url": "http://127.0.0.1:8000"}
    gw = Gateway(GatewayConfig.model_validate({"backends": [backend]}))
    for model, want in (
        ("smollm2-135m-instruct", load_tokenizer(reference_tokenizer).count(prompt)),
        ("llama3-8b", count_tokens(prompt)),
    ):
        gen = CompletionRequest.model_validate({"model": model, "prompt": prompt})
        assert gen.prompt_tokens(gw.prompt_counters.for_model(gen.model).count) == want
    bad = {**backend, "tokenizer": str(tmp_path / "missing.json")}
    with pytest.raises(BurstguardError, match="cannot load a tokenizer"):
        Gateway(GatewayConfig.model_validate({"backends": [bad]}))


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("scrape_interval_s: .inf\n", "scrape_interval_s"),  # was an OverflowError at start
        ("engine_speedup: .inf\n", "engine_speedup"),
        ("fleet: {health: {open_s: .inf}}\n", "fleet.health.open_s"),  # never half-open
        ("fleet: {redis: {lease_ttl_s: .nan}}\n", "fleet.redis.lease_ttl_s"),
        ("classes: [{name: standard, rank: 0, max_wait_s: .inf}]\n", "classes.0.max_wait_s"),
    ],
)
def test_infinite_or_nan_settings_are_refused_naming_the_field(
    tmp_path: Path, yaml_text: str, field: str
) -> None:
    """YAML reads .inf and .nan as floats; `gt=0` lets .inf through."""
    path = tmp_path / "gw.yaml"
    path.write_text(yaml_text)
    with pytest.raises(
        BurstguardError, match=rf"{re.escape(field)}: Input should be a finite number"
    ):
        load_config(path, ["http://x:1"], None, None)


def test_outcomes_and_reasons_are_enums_with_their_wire_strings() -> None:
    """The core counts outcomes and reasons as `Outcome` and `Reason`; metrics labels,
    log lines and records write the strings they always were."""
    gw = core(max_queue_requests=1, max_in_flight=1)
    gw.handle(Arrive(req(0, "standard")), 0.0)  # in flight
    gw.handle(Arrive(req(1, "standard")), 0.0)  # queued: the queue is full
    (shed,) = rejects(gw.handle(Arrive(req(2, "standard")), 0.0))
    assert shed.reason is Reason.QUEUE_FULL
    assert orjson.dumps({"reason": shed.reason}) == b'{"reason":"queue_full"}'
    stats = gw.stats
    assert list(stats.outcomes["standard"]) == ["completed", "rejected", "cancelled", "failed"]
    assert stats.outcomes["standard"][Outcome.REJECTED] == 1 == stats.rejections["queue_full"]
