"""The engine model in virtual time: invariants, the seed's phenomenon, preemption."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import EngineCore, EngineRequest
from burstguard.core.engine.profile import Profile
from burstguard.sim.loop import simulate
from burstguard.wire.summary import summarize
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize

H100 = Profile.load("llama3-8b-h100")


def p95_ttft(pattern: str, rate: float, seed: int = 1) -> float:
    spec = PatternSpec(
        pattern=pattern, duration_s=300, rate=rate, seed=seed,
        prompt_tokens="1024", output_tokens="256",
    )  # fmt: skip
    result = simulate(synthesize(spec), EngineConfig(max_num_seqs=64), H100)
    return summarize(result.records, duration_s=300, source="sim")["ttft_s"]["p95"]


def test_bursts_inflate_p95_ttft_at_equal_mean_rate() -> None:
    steady, bursty = p95_ttft("poisson", 6.0), p95_ttft("burst", 6.0)
    print(f"P95 TTFT poisson {steady:.3f} s, seed burst pattern {bursty:.3f} s")
    assert bursty >= 3 * steady


def test_small_kv_cache_and_long_prompts_preempt_and_still_finish() -> None:
    spec = PatternSpec(
        pattern="burst", duration_s=120, rate=4, seed=1,
        prompt_tokens="3000", output_tokens="512",
    )  # fmt: skip
    workload = synthesize(spec)
    config = EngineConfig(max_num_seqs=64, gpu_memory_utilization=0.24)
    result = simulate(workload, config, H100)
    assert result.preemptions > 0
    assert all(r.ok for r in result.records)
    assert all(r.completion_tokens == 512 for r in result.records)


@settings(max_examples=30, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    outputs=st.integers(1, 64),
    seqs=st.integers(1, 16),
    budget=st.sampled_from([512, 2048, 8192]),
    util=st.sampled_from([0.22, 0.23, 0.3]),
    policy=st.sampled_from(["fcfs", "priority"]),
    caching=st.booleans(),
)
def test_step_invariants(
    prompts: list[int],
    outputs: int,
    seqs: int,
    budget: int,
    util: float,
    policy: str,
    caching: bool,
) -> None:
    config = EngineConfig(
        max_num_seqs=seqs, max_num_batched_tokens=max(budget, seqs), max_model_len=4096,
        gpu_memory_utilization=util, scheduling_policy=policy, enable_prefix_caching=caching,
    )  # fmt: skip
    core = EngineCore(config, H100)
    for k, p in enumerate(prompts):
        shared = tuple(range(p // 16)) if k % 2 == 0 else ()  # even requests share a prefix
        req = EngineRequest(
            f"r{k}", p, outputs, arrival_s=0.0, priority=k % 3, prefix_hashes=shared
        )
        core.add_request(req, 0.0)
    finished: list[str] = []
    now, steps = 0.0, 0
    while core.has_unfinished and steps < 20_000:
        end = core.begin_step(now)
        assert end is not None
        result = core.end_step()
        steps += 1
        now = result.end_s
        assert result.num_prefill_tokens + result.num_decode_seqs <= config.max_num_batched_tokens
        assert len({rid for rid, _ in result.tokens}) <= seqs
        assert core.stats.num_running <= seqs
        assert 0.0 <= core.stats.kv_cache_usage <= 1.0
        core.pool.check()
        finished.extend(result.finished)
    assert sorted(finished) == sorted(f"r{k}" for k in range(len(prompts)))  # none lost or twice
    assert core.stats.kv_cache_usage == 0.0


def test_prefix_caching_reuses_a_finished_requests_prompt_blocks() -> None:
    """A second request with the same 2,000-token prefix computes only its uncached tail
    (vLLM recomputes at least the last token), so its TTFT drops; counted as hits."""
    config = EngineConfig(enable_prefix_caching=True)
    prefix = tuple(range(2000 // 16))
    workload = Workload(
        arrival_s=np.array([0.0, 1.0, 2.0]),
        prompt_tokens=np.array([2000, 2000, 2000]),
        output_tokens=np.array([8, 8, 8]),
        prefix_hashes=[prefix, prefix, tuple(range(1000, 1000 + 2000 // 16))],
    )
    cached = simulate(workload, config, H100).records
    cold = simulate(workload, EngineConfig(), H100).records
    assert cold[1].ttft_s is not None and cached[1].ttft_s is not None
    assert cached[1].ttft_s < 0.5 * cold[1].ttft_s  # the shared prefix is not recomputed
    assert cached[2].ttft_s == pytest.approx(cold[2].ttft_s, rel=0.05)  # other prefix: a miss
    core = EngineCore(config, H100)
    for k in range(2):
        core.add_request(EngineRequest(f"r{k}", 2000, 1, arrival_s=0.0, prefix_hashes=prefix), 0.0)
        core.begin_step(0.0)
        core.end_step()
    assert core.pool.prefix_hits_tokens == 1999 // 16 * 16  # all full blocks but the last token's
    core.pool.check()


def test_requests_admitted_in_one_step_share_a_prefix_as_vllm_does() -> None:
    """vLLM caches a request's blocks when it schedules them (`allocate_slots` ->
    `cache_blocks`), so a request admitted later in the same step reuses them: a burst of
    four requests over one 1,000-token prefix prefills it once, and the step's cost is one
    prefix plus four tails, not four prefixes."""
    prefix = tuple(range(1000 // 16))
    steps = []
    for caching in (True, False):
        core = EngineCore(EngineConfig(enable_prefix_caching=caching), H100)
        for k in range(4):
            req = EngineRequest(f"r{k}", 1100, 1, arrival_s=0.0, prefix_hashes=prefix)
            core.add_request(req, 0.0)
        steps.append(core.begin_step(0.0))
        assert len(core.end_step().tokens) == 4  # all four prefilled in this one step
        assert core.pool.prefix_hits_tokens == (3 * (1000 // 16) * 16 if caching else 0)
        core.pool.check()
    shared, alone = steps
    assert shared is not None and alone is not None
    assert shared < 0.5 * alone  # ~1,400 tokens computed instead of 4,400


def test_priority_policy_serves_lower_value_first() -> None:
    config = EngineConfig(max_num_seqs=1, scheduling_policy="priority")
    core = EngineCore(config, H100)
    for k, prio in enumerate([2, 0, 1]):
        core.add_request(EngineRequest(f"r{k}", 100, 2, arrival_s=0.0, priority=prio), 0.0)
    order: list[str] = []
    now = 0.0
    while core.has_unfinished:
        core.begin_step(now)
        result = core.end_step()
        now = result.end_s
        order.extend(result.finished)
    assert order == ["r1", "r2", "r0"]


def test_abort_frees_blocks_at_once() -> None:
    core = EngineCore(EngineConfig(), H100)
    core.add_request(EngineRequest("a", 4000, 100, arrival_s=0.0), 0.0)
    core.begin_step(0.0)
    core.end_step()
    assert core.stats.kv_cache_usage > 0
    assert core.abort("a", 0.1)
    assert core.stats.kv_cache_usage == 0.0
    assert not core.has_unfinished


def test_decode_step_respects_the_bandwidth_floor() -> None:
    """16 GB of weights over 3.35 TB/s: no H100 decode step is faster than ~4.8 ms."""
    workload = Workload(
        arrival_s=np.zeros(1), prompt_tokens=np.array([64]), output_tokens=np.array([32])
    )
    rec = simulate(workload, EngineConfig(), H100).records[0]
    assert min(rec.itl_s) >= 0.0047
    assert rec.ttft_s == pytest.approx(0.010, abs=0.006)


@settings(max_examples=25, deadline=None)
@given(
    pattern=st.sampled_from(["poisson", "burst"]),
    rate=st.sampled_from([2.0, 8.0, 20.0]),
    seqs=st.sampled_from([4, 32, 256]),
    util=st.sampled_from([0.22, 0.24, 0.9]),
    policy=st.sampled_from(["fcfs", "priority"]),
    chunked=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_fast_forward_gives_the_same_results_as_single_steps(
    pattern: str, rate: float, seqs: int, util: float, policy: str, chunked: bool, seed: int
) -> None:
    """Decode runs applied at once (`run_decodes`) must change nothing a user can see:
    every record, the step count, the preemptions and the end time are identical."""
    spec = PatternSpec(
        pattern=pattern, duration_s=30, rate=rate, seed=seed, classes="interactive=0.5,batch=0.5",
        prompt_tokens="lognormal:mean=1500,sigma=0.8", output_tokens="lognormal:mean=200,sigma=0.8",
    )  # fmt: skip
    workload = synthesize(spec)
    config = EngineConfig(
        max_num_seqs=seqs, gpu_memory_utilization=util, scheduling_policy=policy,
        enable_chunked_prefill=chunked, max_model_len=4096,
    )  # fmt: skip
    single = simulate(workload, config, H100, fast_forward=False)
    fast = simulate(workload, config, H100)
    assert fast.records == single.records
    assert (fast.steps, fast.preemptions, fast.end_s) == (
        single.steps, single.preemptions, single.end_s,
    )  # fmt: skip


def test_sim_adds_the_profiles_chat_template_tokens(tmp_path: Path) -> None:
    """The sim serves requests as bench sends them (chat), so a profile's chat template
    tokens lengthen every prompt: they show in the records and cost prefill time."""
    doc = yaml.safe_load(Profile.load("smollm2-135m-cpu").path.read_text())
    spec = PatternSpec(
        pattern="constant", duration_s=50, rate=0.2, seed=3, prompt_tokens="60", output_tokens="4"
    )  # 5 s apart: each prefill runs alone
    ttft = {}
    for extra in (0, 200):
        doc["model"]["chat_template_tokens"] = extra
        path = tmp_path / f"p{extra}.yaml"
        path.write_text(yaml.safe_dump(doc))
        result = simulate(synthesize(spec), EngineConfig(max_num_seqs=8), Profile.load(path))
        assert {r.prompt_tokens for r in result.records} == {60 + extra}
        ttft[extra] = summarize(result.records, duration_s=50, source="sim")["ttft_s"]["p50"]
    per_token = doc["fitted"]["c_prefill_token_s"]
    assert ttft[200] - ttft[0] == pytest.approx(200 * per_token, rel=0.05)


def test_a_long_simulation_reports_its_progress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sim` printed nothing for a run of tens of seconds (1,024 replicas, or 100k
    requests): the virtual clock now goes to a status line on stderr, every
    PROGRESS_WALL_S of wall time (0 here: every call)."""
    from burstguard.sim import cli as sim_cli

    monkeypatch.setattr(sim_cli, "PROGRESS_WALL_S", 0.0)
    spec = PatternSpec(pattern="poisson", rate=20.0, duration_s=20.0, seed=0)
    workload = synthesize(spec)
    seen: list[float] = []
    plain = simulate(workload, EngineConfig(max_num_seqs=64), H100)
    watched = simulate(workload, EngineConfig(max_num_seqs=64), H100, progress=seen.append)
    assert len(seen) > 10 and seen == sorted(seen)  # the virtual clock, as it goes
    assert [r.ttft_s for r in watched.records] == [r.ttft_s for r in plain.records]
    report = sim_cli.sim_progress(float(workload.arrival_s[-1]), len(workload))
    report(seen[len(seen) // 2])
    err = capsys.readouterr().err
    assert f"sim: {len(workload):,} requests, virtual time" in err and " s of ~20 s" in err
