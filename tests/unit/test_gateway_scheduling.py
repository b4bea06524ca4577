"""Gateway scheduling v2 in virtual time: work-conserving release, preemption, aging that
bounds the wait, per-class Retry-After, and the must-show table (a smaller version)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from tests.conftest import REPO_ROOT

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.core import TICK_S, GatewayCore
from burstguard.core.gateway.events import Arrive, Finish, FirstToken, Preempt, Release, Tick
from burstguard.core.gateway.request import GatewayRequest
from burstguard.errors import BurstguardError
from burstguard.sim.compare import capacity, compare
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.synth import PatternSpec, synthesize

H100 = Profile.load("llama3-8b-h100")
DEMO = REPO_ROOT / "examples" / "gateway-demo.yaml"
MIX = PatternSpec(
    pattern="burst", duration_s=60.0, prompt_tokens="1024", output_tokens="256",
    classes="interactive=0.7,batch=0.3", class_output_tokens=(("batch", "uniform:512-1024"),),
)  # fmt: skip


def config(**over: Any) -> GatewayConfig:
    """Two classes, 4 slots, a backend that resumes; `over` replaces top-level fields."""
    data: dict[str, Any] = {
        "backends": [{"url": "http://unused", "resume": True}],
        "default_class": "interactive",
        "classes": [
            {"name": "interactive", "rank": 0, "ttft_target_s": 1.0},
            {"name": "batch", "rank": 1, "preemptible": True, "max_preemptions": 1},
        ],
        "admission": {"max_in_flight": 4, "min_in_flight": 1, "adapt": False},
    }
    data.update(over)
    return GatewayConfig.from_dict(data)


def req(rid: str, cls: str, t: float, prompt: int = 100, out: int = 100) -> GatewayRequest:
    return GatewayRequest(rid, t, prompt, out, cls, "t")


def kinds(effects: list[Any]) -> list[tuple[str, str]]:
    return [(type(e).__name__, e.req.id) for e in effects]


# -- work-conserving release and class caps ---------------------------------------------


def test_a_class_cap_counts_only_its_own_requests() -> None:
    """Batch capped at half the slots gets its half even while interactive holds the
    rest; before, the cap counted every class's requests in flight and batch got none."""
    cfg = config(classes=[
        {"name": "interactive", "rank": 0},
        {"name": "batch", "rank": 1, "max_in_flight_fraction": 0.5},
    ])  # fmt: skip
    gw = GatewayCore(cfg)
    out = []
    for i in range(2):
        out += gw.handle(Arrive(req(f"i{i}", "interactive", 0.0)), 0.0)
    for i in range(4):
        out += gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    assert kinds(out) == [("Release", "i0"), ("Release", "i1"), ("Release", "b0"),
                          ("Release", "b1")]  # fmt: skip


def test_batch_fills_every_free_slot_while_no_better_class_waits() -> None:
    gw = GatewayCore(config())
    out: list[Any] = []
    for i in range(6):
        out += gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    assert [k for k in kinds(out) if k[0] == "Release"] == [("Release", f"b{i}") for i in range(4)]


def test_a_class_below_its_guaranteed_share_goes_first_and_keeps_it() -> None:
    """Batch guaranteed a quarter of 4 slots: with interactive waiting, a free slot goes to
    batch while batch holds none, and interactive preempts batch only above that share."""
    cfg = config(classes=[
        {"name": "interactive", "rank": 0},
        {"name": "batch", "rank": 1, "preemptible": True, "min_in_flight_fraction": 0.25},
    ])  # fmt: skip
    gw = GatewayCore(cfg)
    for i in range(4):
        gw.handle(Arrive(req(f"i{i}", "interactive", 0.0)), 0.0)
    for i in range(2):
        gw.handle(Arrive(req(f"b{i}", "batch", 0.1)), 0.1)
    gw.handle(Arrive(req("i4", "interactive", 0.2)), 0.2)
    out = gw.handle(Finish("i0", 10), 1.0)  # interactive waits, batch holds no slot
    assert kinds(out) == [("Release", "b0")]
    out = gw.handle(Finish("i1", 10), 1.5)  # batch has its share: priority again
    assert kinds(out) == [("Release", "i4")]
    out = gw.handle(Arrive(req("i5", "interactive", 2.0)), 2.0)
    assert kinds(out) == []  # b0 is batch's guaranteed slot: not preempted
    with pytest.raises(BurstguardError, match="min_in_flight_fraction sums to 1"):
        config(classes=[
            {"name": "interactive", "rank": 0, "min_in_flight_fraction": 0.5},
            {"name": "batch", "rank": 1, "min_in_flight_fraction": 0.5},
        ])  # fmt: skip


# -- preemption --------------------------------------------------------------------------


def test_a_waiting_interactive_request_preempts_the_batch_request_with_fewest_tokens() -> None:
    gw = GatewayCore(config())
    for i in range(4):
        gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    for i, t in ((0, 0.1), (1, 0.2), (2, 0.3)):  # first tokens: b3 none, b2 latest
        gw.handle(FirstToken(f"b{i}"), t)
    out = gw.handle(Arrive(req("i0", "interactive", 1.0)), 1.0)
    assert kinds(out) == [("Preempt", "b3"), ("Release", "i0")]
    out = gw.handle(Arrive(req("i1", "interactive", 1.0)), 1.0)
    assert kinds(out) == [("Preempt", "b2"), ("Release", "i1")]
    # the preempted requests are queued at their original arrival and resume when slots free
    out = gw.handle(Finish("i0", 10), 2.0)
    assert kinds(out) == [("Release", "b2")]  # b2 and b3 arrived together: seq order
    assert isinstance(out[0], Release) and out[0].resumed
    # max_preemptions 1: b2 is not preempted again; b0/b1 are the candidates
    out = gw.handle(Arrive(req("i2", "interactive", 2.5)), 2.5)
    assert kinds(out) == [("Preempt", "b1"), ("Release", "i2")]
    assert gw.stats.preemptions == {"interactive": 0, "batch": 3}


def test_no_preemption_without_a_backend_that_resumes_or_before_min_run() -> None:
    no_resume = config(backends=[{"url": "http://unused"}])
    young = config(classes=[
        {"name": "interactive", "rank": 0},
        {"name": "batch", "rank": 1, "preemptible": True, "min_run_s": 5.0},
    ])  # fmt: skip
    for cfg, preempts in ((no_resume, False), (young, False), (config(), True)):
        gw = GatewayCore(cfg)
        for i in range(4):
            gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
        out = gw.handle(Arrive(req("i0", "interactive", 1.0)), 1.0)
        assert any(isinstance(e, Preempt) for e in out) is preempts


def test_preempt_ends_cuts_a_request_that_cannot_resume_once_and_counts_it() -> None:
    """`preempt_ends` (the picker's `epp.preempt: end`): a preemptible request on a backend
    that does not resume is preempted without resume (`Preempt(resume=False)`), counted
    failed and preempted, and never released again; `min_run_s` and a class that is not
    preemptible hold as with resume; `max_preemptions: 0` means never."""
    no_resume = [{"url": "http://unused"}]
    batch = {"name": "batch", "rank": 1, "preemptible": True, "min_run_s": 1.0}
    cfg = config(backends=no_resume, classes=[
        {"name": "interactive", "rank": 0}, batch, {"name": "standard", "rank": 2}])  # fmt: skip
    assert not any(isinstance(e, Preempt) for e in _fill_and_burst(GatewayCore(cfg), 2.0))
    gw = GatewayCore(cfg, preempt_ends=True)
    gw.handle(Arrive(req("s0", "standard", 0.0)), 0.0)  # not preemptible: never cut
    for i in range(3):
        gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    gw.handle(FirstToken("b0"), 0.1)
    gw.handle(FirstToken("b2"), 0.3)
    early = gw.handle(Arrive(req("i0", "interactive", 0.5)), 0.5)
    assert not any(isinstance(e, Preempt) for e in early)  # min_run_s: 1 s
    out = gw.handle(Tick(), 1.0)  # b1: no first token, the fewest tokens out
    assert kinds(out) == [("Preempt", "b1"), ("Release", "i0")]
    assert isinstance(out[0], Preempt) and not out[0].resume
    out = gw.handle(Arrive(req("i1", "interactive", 1.1)), 1.1)
    assert kinds(out) == [("Preempt", "b2"), ("Release", "i1")]  # the latest first token
    out = gw.handle(Arrive(req("i2", "interactive", 1.2)), 1.2)
    assert kinds(out) == [("Preempt", "b0"), ("Release", "i2")]
    assert gw.handle(Arrive(req("i3", "interactive", 1.3)), 1.3) == []  # s0 stays; i3 waits
    stats = gw.stats
    assert stats.preemptions["batch"] == 3 and stats.outcomes["batch"]["failed"] == 3
    assert stats.in_flight_requests == 4 and stats.queue_depth["batch"] == 0
    gw.handle(Finish("b1", 10), 1.4)  # a late word about an ended request changes nothing
    assert gw.stats.outcomes["batch"]["completed"] == 0
    never = config(backends=no_resume, classes=[
        {"name": "interactive", "rank": 0}, {**batch, "max_preemptions": 0}])  # fmt: skip
    gw = GatewayCore(never, preempt_ends=True)
    assert not any(isinstance(e, Preempt) for e in _fill_and_burst(gw, 2.0))


def _fill_and_burst(gw: GatewayCore, t: float) -> list[Any]:
    """Four batch requests fill the slots at 0; an interactive one arrives at `t`."""
    for i in range(4):
        gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    return gw.handle(Arrive(req("i0", "interactive", t)), t)


def test_a_preempted_request_is_never_shed_from_the_queue() -> None:
    """Its client already has a 200 and part of the answer: no expiry, no eviction."""
    cfg = config(
        classes=[
            {"name": "interactive", "rank": 0},
            {"name": "batch", "rank": 1, "preemptible": True, "queue_deadline_s": 1.0},
        ],
        admission={"max_in_flight": 1, "min_in_flight": 1, "adapt": False,
                   "max_queue_requests": 2},
    )  # fmt: skip
    gw = GatewayCore(cfg)
    gw.handle(Arrive(req("b0", "batch", 0.0)), 0.0)
    out = gw.handle(Arrive(req("i0", "interactive", 0.5)), 0.5)
    assert kinds(out) == [("Preempt", "b0"), ("Release", "i0")]
    out = gw.handle(Arrive(req("b1", "batch", 0.6)), 0.6)  # queue: b0 (preempted), b1
    out += gw.handle(Arrive(req("i1", "interactive", 0.7)), 0.7)  # full: evicts b1, not b0
    out += gw.handle(Tick(), 10.0)  # b0 is far past 2x its deadline
    assert [(k, r) for k, r in kinds(out) if k == "Reject"] == [("Reject", "b1")]
    out = gw.handle(Finish("i0", 5), 10.0)
    out += gw.handle(Finish("i1", 5), 10.5)
    assert ("Release", "b0") in kinds(out)


# -- aging bounds the wait ---------------------------------------------------------------


def test_aging_bounds_batch_wait_under_sustained_interactive_load() -> None:
    """Poisson 8 req/s, 95% interactive, batch capped at 2 of 48 slots with max_wait_s 5:
    slots stay free, and an aged batch request passes its class cap, so none waits more
    than 5 s plus one dispatch tick (and one engine step to start). Before, an aged
    request was still refused by its class cap: median waits of 16 s."""
    rng = np.random.default_rng(1)
    t, specs = 0.0, []
    for k in range(480):
        t += rng.exponential(1 / 8)
        cls = "batch" if rng.random() < 0.05 else "interactive"
        specs.append(RequestSpec(f"r{k}", t, 512, 1024 if cls == "batch" else 64, cls))
    cfg = GatewayConfig.from_dict({
        "default_class": "interactive",
        "classes": [
            {"name": "interactive", "rank": 0},
            {"name": "batch", "rank": 1, "max_wait_s": 5.0, "max_in_flight_fraction": 0.05},
        ],
        "admission": {"max_in_flight": 48, "min_in_flight": 1, "adapt": False},
    })  # fmt: skip
    result = simulate_gateway(Workload.from_specs(specs), EngineConfig(max_num_seqs=48), H100, cfg)
    waits = [r.queue_s for r in result.records if r.priority_class == "batch"]
    assert all(w is not None for w in waits) and len(waits) > 10
    assert max(waits) > 4.0  # the cap held them: aging is what released them
    assert max(waits) <= 5.0 + TICK_S + 0.1, sorted(waits)[-5:]


# -- Retry-After per class ---------------------------------------------------------------


def test_retry_after_is_per_class_and_honest_in_a_sustained_overload() -> None:
    """2x capacity for 60 s, half interactive, half batch, both shed. Per class, the
    median client is told no more than 2x the time until its class next admits a request,
    and the median client that comes back at its Retry-After finds its class admitting.
    Batch is guaranteed a quarter of the slots: without it, interactive's inflow (about
    the capacity) starved batch, which admitted in rare windows (a returning batch client
    was admitted in ~10-23%). With it, but with the return schedule spread over a whole
    queue deadline, batch was told ~10 s when its class admitted again within ~0.7 s."""
    cfg = GatewayConfig.from_dict({
        "default_class": "interactive",
        "classes": [
            {"name": "interactive", "rank": 0, "queue_deadline_s": 2.0},
            {"name": "batch", "rank": 1, "queue_deadline_s": 10.0, "min_in_flight_fraction": 0.25},
        ],
        "admission": {"max_in_flight": 16, "min_in_flight": 1, "adapt": False,
                      "min_retry_after_s": 0.0},
    })  # fmt: skip
    rng = np.random.default_rng(2)
    t, specs = 0.0, []
    while t < 60:  # 16 req/s; the engine drains ~7.9
        t += rng.exponential(1 / 16)
        cls = "interactive" if rng.random() < 0.5 else "batch"
        specs.append(RequestSpec(f"r{len(specs)}", t, 512, 256, cls))
    result = simulate_gateway(Workload.from_specs(specs), EngineConfig(max_num_seqs=16), H100, cfg)
    told: dict[str, float] = {}
    for cls in ("interactive", "batch"):
        mine = [r for r in result.records if r.priority_class == cls]
        admitted = sorted(r.scheduled_s for r in mine if r.status == 200)
        back_ok, ratios, told_s = [], [], []
        for r in mine:
            if r.status != 429 or r.scheduled_s > 50:
                continue
            assert r.retry_after_s is not None
            back = r.scheduled_s + r.retry_after_s
            later = [a for a in admitted if a >= r.scheduled_s]
            at_back = [a for a in admitted if a >= back]
            if not later or not at_back:
                continue
            back_ok.append(at_back[0] - back <= 1.0)  # its class admits within 1 s of it
            ratios.append(r.retry_after_s / max(later[0] - r.scheduled_s, 0.5))
            told_s.append(r.retry_after_s)
        ttft = np.median([r.ttft_s for r in mine if r.status == 200 and r.ttft_s is not None])
        print(f"{cls}: admitted {len(admitted)} of {len(mine)} (TTFT p50 {ttft:.2f} s), "
              f"told median {np.median(told_s):.2f} s, told / next admission median "
              f"{np.median(ratios):.2f}, back at Retry-After admitted within 1 s "
              f"{np.mean(back_ok):.0%}")  # fmt: skip
        assert len(ratios) > 10, cls
        assert float(np.median(ratios)) <= 2.0, (cls, float(np.median(ratios)))
        assert np.mean(back_ok) >= 0.5, (cls, float(np.mean(back_ok)))
        told[cls] = float(np.median(told_s))
    assert told["interactive"] < 0.5 * told["batch"], told


# -- the must-show table, smaller ---------------------------------------------------------


@pytest.mark.parametrize("load", [0.7, 0.8])
def test_demo_mix_keeps_interactive_slo_and_direct_throughput(load: float) -> None:
    """The demo's mix through examples/gateway-demo.yaml (docs/gateway.md has seeds 0-4):
    interactive TTFT <= 1 s for >= 99% and output tokens/s >= 95% of direct. Seed 0 is the
    hard one: direct leaves interactive at 78-86%; without preemption the gateway reaches
    only 82-90% there, and with batch capped at 20% of the slots it loses 33-37% of the
    throughput."""
    engine = EngineConfig(max_num_seqs=48)
    gateway = GatewayConfig.load(DEMO)
    cap = capacity(MIX, engine, H100)
    d, g = compare(synthesize(replace(MIX, rate=load * cap, seed=0)), engine, H100, gateway, 1.0)
    share = g.output_tokens_per_s / d.output_tokens_per_s
    print(f"{load:.0%}: interactive {d.interactive_ttft_attainment:.1%} -> "
          f"{g.interactive_ttft_attainment:.1%}, throughput {share:.1%}, "
          f"{g.preemptions} preemptions, {g.reprefill_tokens} tokens prefilled again")  # fmt: skip
    assert d.interactive_ttft_attainment < 0.9  # the burst hurts without the gateway
    assert g.interactive_ttft_attainment >= 0.99
    assert share >= 0.95
    assert g.preemptions > 0 and g.reprefill_tokens > 0
    assert g.output_tokens == d.output_tokens  # every token, none duplicated or lost


def test_a_resumed_request_delivers_each_token_once() -> None:
    """A preempted request's client gets max_tokens tokens in all, TTFT once."""
    gw_cfg = config(admission={"max_in_flight": 1, "min_in_flight": 1, "adapt": False})
    specs = [
        RequestSpec("b", 0.0, 512, 400, "batch"),
        RequestSpec("i", 2.0, 512, 50, "interactive"),
    ]
    result = simulate_gateway(
        Workload.from_specs(specs), EngineConfig(max_num_seqs=4), H100, gw_cfg
    )
    b, i = result.records
    assert result.gateway is not None and result.gateway.preemptions["batch"] == 1
    assert b.ok and b.completion_tokens == 400 and i.ok and i.completion_tokens == 50
    assert b.ttft_s is not None and b.ttft_s < 1.0
    assert result.reprefill_tokens > 512  # the prompt and the tokens produced before


def test_the_sim_ends_what_the_picker_preempts_as_the_picker_does() -> None:
    """`simulate_gateway(epp=True)` with `epp.preempt: end`: a batch stream cut for an
    interactive request ends at that moment with the picker's in-band error (status 200,
    `stream_broken`, code preempted, the tokens it had) and is never resumed; one cut before
    its first token gets the picker's 503. With `preempt: off` nothing is cut and the
    interactive requests wait."""
    specs = [
        RequestSpec("b", 0.0, 512, 800, "batch"),
        RequestSpec("i", 2.0, 512, 50, "interactive"),
        RequestSpec("long", 4.0, 7000, 400, "batch"),  # prefills past 4.05
        RequestSpec("j", 4.05, 512, 50, "interactive"),
    ]
    admission = {"max_in_flight": 1, "min_in_flight": 1, "adapt": False}
    wl, engine = Workload.from_specs(specs), EngineConfig(max_num_seqs=4)
    result = simulate_gateway(wl, engine, H100, config(admission=admission,
                              epp={"preempt": "end"}), epp=True)  # fmt: skip
    b, i, long, j = result.records
    assert result.gateway is not None and result.gateway.preemptions["batch"] == 2
    assert result.gateway.outcomes["batch"]["failed"] == 2 and result.reprefill_tokens == 0
    assert (b.status, b.error, b.error_code) == (200, "stream_broken", "preempted")
    assert b.e2e_s == pytest.approx(2.0) and b.ttft_s is not None
    assert 0 < (b.completion_tokens or 0) < 800
    assert (long.status, long.error_code, long.ttft_s) == (503, "preempted", None)
    assert long.e2e_s == pytest.approx(0.05)
    assert i.ok and j.ok and (i.ttft_s or 9) < 1.0 and (j.ttft_s or 9) < 1.0
    off = simulate_gateway(wl, engine, H100, config(admission=admission), epp=True)
    assert off.gateway is not None and off.gateway.preemptions["batch"] == 0
    assert all(r.ok for r in off.records) and (off.records[1].ttft_s or 0) > 1.0


def test_a_request_its_shell_cannot_resume_is_not_preempted() -> None:
    """A streamed token-id prompt cannot be continued with text: the live shell marks it
    not resumable, and the core takes another victim (or none)."""
    gw = GatewayCore(config())
    for i in range(1, 4):
        gw.handle(Arrive(req(f"b{i}", "batch", 0.0)), 0.0)
    # released last: the best victim, were it resumable
    gw.handle(Arrive(replace(req("ids", "batch", 0.5), resumable=False)), 0.5)
    out = gw.handle(Arrive(req("i0", "interactive", 1.0)), 1.0)
    assert kinds(out) == [("Preempt", "b1"), ("Release", "i0")]


def test_forwarded_priority_is_honoured_as_vllm_does() -> None:
    """forward_priority sends the class rank as vLLM's `priority`: an engine on the
    priority policy takes it (interactive prefills first), one on FCFS refuses a non-zero
    priority with 400, as vLLM does."""
    cfg = config(
        backends=[{"url": "http://unused", "forward_priority": True}],
        admission={"max_in_flight": 8, "min_in_flight": 1, "adapt": False},
    )
    specs = [RequestSpec(f"b{i}", 0.0, 2000, 16, "batch") for i in range(4)]
    specs += [RequestSpec(f"i{i}", 0.0, 2000, 16, "interactive") for i in range(4)]
    wl = Workload.from_specs(specs)
    fcfs = simulate_gateway(
        wl, EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048), H100, cfg
    )
    assert [r.status for r in fcfs.records] == [400] * 4 + [200] * 4
    prio = EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048, scheduling_policy="priority")
    result = simulate_gateway(wl, prio, H100, cfg)
    assert all(r.ok for r in result.records)
    # released in arrival order, batch first: b0 starts on the empty engine, and then the
    # engine prefills the interactive requests before the other batch ones
    ttft = {r.id: r.ttft_s or 0.0 for r in result.records}
    assert max(ttft[f"i{i}"] for i in range(4)) < min(ttft[f"b{i}"] for i in range(1, 4))
    unforwarded = config(admission={"max_in_flight": 8, "min_in_flight": 1, "adapt": False})
    plain = {r.id: r.ttft_s or 0.0 for r in simulate_gateway(wl, prio, H100, unforwarded).records}
    assert max(plain[f"b{i}"] for i in range(4)) < min(plain[f"i{i}"] for i in range(4))


def test_a_preempted_request_is_charged_to_its_tenant_once() -> None:
    """VTC at a 1-slot gateway: a batch request preempted three times by interactive
    arrivals and released again each time is the same work: its tenant is charged its
    predicted cost once (charged per release, it had paid four times)."""
    gw = GatewayCore(config(
        classes=[
            {"name": "interactive", "rank": 0},
            {"name": "batch", "rank": 1, "preemptible": True, "max_preemptions": 3},
        ],
        policy={"fairness": "vtc"},
        admission={"max_in_flight": 1, "min_in_flight": 1, "adapt": False},
    ))  # fmt: skip
    batch = GatewayRequest("a0", 0.0, 100, 100, "batch", "a")
    assert kinds(gw.handle(Arrive(batch), 0.0)) == [("Release", "a0")]
    cost = gw.tenant_service("batch", "a")
    assert cost is not None and cost > 0
    for k in range(3):
        out = gw.handle(Arrive(req(f"i{k}", "interactive", 1.0 + k)), 1.0 + k)
        assert kinds(out) == [("Preempt", "a0"), ("Release", f"i{k}")]
        assert kinds(gw.handle(Finish(f"i{k}", 100), 1.5 + k)) == [("Release", "a0")]
    assert gw.tenant_service("batch", "a") == cost
