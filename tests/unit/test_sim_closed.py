"""Closed-loop clients in virtual time (`sim --concurrency`, `sim --burst-cycle`) and the
engine series every sim run now records."""

from __future__ import annotations

import numpy as np
import pytest

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.sim.closed import Cycle, Users, simulate_closed
from burstguard.sim.loop import simulate
from burstguard.sim.series import KV_USAGE, RUNNING, WAITING
from burstguard.workload.cycle import BurstCycle, CycleSpec
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.synth import PatternSpec, shape_pool, synthesize

H100 = Profile.load("llama3-8b-h100")
SHAPES = shape_pool(PatternSpec(duration_s=60, prompt_tokens="512", output_tokens="128"))


def test_burst_cycle_idles_from_each_bursts_end() -> None:
    cycle = BurstCycle(CycleSpec(duration_s=120, seed=4))
    result = simulate_closed(Cycle(SHAPES, cycle), EngineConfig(max_num_seqs=4), H100)
    assert all(r.ok for r in result.records)
    by_burst: dict[int, list] = {}
    for r in result.records:
        by_burst.setdefault(int(r.id[1:].split("-")[0]), []).append(r)
    assert len(by_burst) == len(cycle.log) >= 4
    for k, entry in enumerate(cycle.log):
        recs = by_burst[k]
        assert 15 <= len(recs) == entry["size"] <= 30
        assert {r.scheduled_s for r in recs} == {entry["start_s"]}
        end = max(r.scheduled_s + r.e2e_s for r in recs)
        assert entry["finished_s"] == pytest.approx(end)
        assert 5 <= entry["idle_s"] <= 15
        if k + 1 < len(cycle.log):
            assert cycle.log[k + 1]["start_s"] == pytest.approx(end + entry["idle_s"])


def test_users_keep_n_in_flight_with_think_time() -> None:
    users = Users(SHAPES, users=8, duration_s=30, think_s=0.5, ramp_up_s=2.0)
    result = simulate_closed(users, EngineConfig(), H100)
    recs = result.records
    assert len(recs) > 8 * 5 and all(r.ok for r in recs)
    events = sorted(
        [(r.scheduled_s, 1) for r in recs] + [(r.scheduled_s + r.e2e_s, -1) for r in recs]
    )
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == 8
    assert max(r.scheduled_s for r in recs) < 30
    # each user's next request comes `think_s` after its previous one ended
    ends = sorted(r.scheduled_s + r.e2e_s for r in recs)
    later = [r.scheduled_s for r in recs if int(r.id[1:]) >= 8]  # c0-c7: the users' starts
    assert all(any(abs(s - (e + 0.5)) < 1e-9 for e in ends) for s in later)


def test_sim_runs_record_the_engine_series() -> None:
    wl = synthesize(PatternSpec(pattern="burst", duration_s=60, prompt_tokens="512"))
    result = simulate(wl, EngineConfig(max_num_seqs=4), H100)
    series = result.series
    assert series is not None
    t = np.asarray(series["t"])
    assert t[0] == 0 and np.allclose(np.diff(t), 0.5) and t[-1] >= result.end_s
    assert max(series[WAITING]) >= 10  # the bursts queued behind 4 slots
    assert max(series[RUNNING]) == 4
    assert 0 < max(series[KV_USAGE]) < 1
    tokens = np.asarray(series["vllm:iteration_tokens_total_sum"])
    assert tokens[-1] == sum(r.prompt_tokens + r.completion_tokens - 1 for r in result.records)


@pytest.mark.parametrize(
    ("users", "blocks", "think_s"), [(24, None, 0.0), (24, None, 0.3), (64, 1500, 0.0)]
)
def test_closed_loop_fast_forward_gives_the_same_results_as_single_steps(
    users: int, blocks: int | None, think_s: float
) -> None:
    """Closed loop steps on the one replica stepper (`sim.replicas`) with decode
    fast-forward: runs end at the first finish (it sends the next request), and arrivals
    during a run's last step wait for it, so every record is the same as step by step
    (fewer users than slots: runs with nothing waiting; a small KV pool: preemptions)."""
    shape = PatternSpec(
        duration_s=40, seed=2, prompt_tokens="lognormal:mean=800,sigma=0.5",
        output_tokens="lognormal:mean=150,sigma=0.8",
    )  # fmt: skip
    shapes = shape_pool(shape)
    config = EngineConfig(max_num_seqs=48, num_gpu_blocks_override=blocks, max_model_len=4096)
    runs = [
        simulate_closed(Users(shapes, users, 40, think_s, 1.0), config, H100, fast_forward=ff)
        for ff in (False, True)
    ]
    cycle = CycleSpec(duration_s=60, seed=5)
    cycles = [
        simulate_closed(Cycle(shapes, BurstCycle(cycle)), config, H100, fast_forward=ff)
        for ff in (False, True)
    ]
    assert (runs[0].preemptions > 0) == (blocks is not None)
    for single, fast in (runs, cycles):
        assert len(single.records) > 100
        assert fast.records == single.records
        assert (fast.steps, fast.preemptions, fast.end_s) == (
            single.steps, single.preemptions, single.end_s,
        )  # fmt: skip


def test_closed_loop_requests_carry_their_prefix_blocks() -> None:
    """A closed loop's requests reach the engine with their prefix blocks (in the shapes'
    block size), so prefix caching serves the shared system prompt from cache."""
    prompt = 2048

    def shapes(shared: bool) -> Workload:
        blocks = (1, 2, 3) if shared else ()
        specs = [RequestSpec(f"s{i}", 0.0, prompt, 32, prefix_hashes=blocks) for i in range(8)]
        wl = Workload.from_specs(specs)
        wl.meta["block_tokens"] = 512  # Mooncake's: 3 blocks = 1536 tokens shared
        return wl

    config = EngineConfig(enable_prefix_caching=True)
    ttft = {}
    for shared in (False, True):
        records = simulate_closed(Users(shapes(shared), 4, 20), config, H100).records
        ttft[shared] = np.mean([r.ttft_s for r in records])
    assert ttft[True] < 0.6 * ttft[False]
