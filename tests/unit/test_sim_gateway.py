"""`burstguard sim --gateway`: the gateway core in front of the engine core, in virtual time.

The point of simulating a policy is to see, before deploying it, that a burst is absorbed
the way the config promises: batch shed first, interactive served sooner than with no
gateway at all. These runs are deterministic (no clock, no randomness beyond a seed).
"""

from __future__ import annotations

import gc
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import BURSTGUARD, REPO_ROOT

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.sim.gateway_loop import gateway_summary, simulate_gateway
from burstguard.sim.heap import EventHeap
from burstguard.sim.loop import simulate
from burstguard.wire.summary import summarize
from burstguard.workload.spec import RequestSpec, Workload

H100 = Profile.load("llama3-8b-h100")
ENGINE = EngineConfig(max_num_seqs=64)
EXAMPLE = REPO_ROOT / "examples" / "gateway.yaml"
MIX = ["interactive"] * 2 + ["standard"] * 2 + ["batch"] * 6


def burst_workload(burst: int = 600, seed: int = 7) -> Workload:
    """2 req/s for 40 s plus `burst` requests within 2 s at t=10 (20% interactive)."""
    rng = np.random.default_rng(seed)
    specs: list[RequestSpec] = []
    t, k = 0.0, 0
    while t < 40:
        t += rng.exponential(0.5)
        specs.append(RequestSpec(f"s{k}", t, int(rng.integers(200, 1000)), 128, MIX[k % 10]))
        k += 1
    for j in range(burst):
        cls = MIX[(j * 7) % 10]
        specs.append(
            RequestSpec(f"b{j}", 10 + 2 * j / burst, int(rng.integers(200, 1000)), 256, cls)
        )
    return Workload.from_specs(specs)


def by_class(records: list, duration_s: float = 40) -> dict:
    return summarize(records, duration_s=duration_s, source="sim")["by_class"]


def test_a_burst_sheds_batch_first_and_serves_interactive_sooner() -> None:
    workload = burst_workload()
    config = GatewayConfig.load(EXAMPLE)
    direct = simulate(workload, ENGINE, H100)
    gw = simulate_gateway(workload, ENGINE, H100, config)
    block = gateway_summary(gw, config)["classes"]
    d, g = by_class(direct.records), by_class(gw.records)
    shed = {c: block[c]["shed_fraction"] for c in block}
    print(f"{len(workload)} requests; shed fraction {shed}; interactive TTFT p95 direct "
          f"{d['interactive']['ttft_s']['p95']:.2f} s vs gateway "
          f"{g['interactive']['ttft_s']['p95']:.2f} s; p50 {d['interactive']['ttft_s']['p50']:.2f}"
          f" vs {g['interactive']['ttft_s']['p50']:.2f} s")  # fmt: skip
    assert all(r.error is None for r in direct.records)  # no gateway: everything queues
    # batch degrades first: it waits (up to twice its deadline) and is shed more, and
    # sooner; interactive is hardly shed
    assert shed["interactive"] <= 0.05 and shed["interactive"] < shed["batch"]
    first_shed = {
        c: min(
            (r.scheduled_s + r.e2e_s for r in gw.records
             if r.status == 429 and r.priority_class == c),
            default=math.inf,
        )
        for c in ("interactive", "batch")
    }  # fmt: skip
    assert first_shed["batch"] < first_shed["interactive"]
    assert shed["standard"] <= shed["batch"]
    assert g["interactive"]["ttft_s"]["p95"] < 0.5 * d["interactive"]["ttft_s"]["p95"]
    assert g["interactive"]["ttft_s"]["p95"] < g["batch"]["ttft_s"]["p95"]
    assert block["interactive"]["ttft_target_attainment"] > (
        sum(1 for r in direct.records if r.priority_class == "interactive" and r.ttft_s <= 1.0)
        / block["interactive"]["requests"]
    )


def test_every_request_ends_once_and_shed_ones_carry_retry_after() -> None:
    workload = burst_workload()
    gw = simulate_gateway(workload, ENGINE, H100, GatewayConfig.load(EXAMPLE))
    assert gw.gateway is not None
    outcomes = gw.gateway.outcomes
    assert sum(sum(o.values()) for o in outcomes.values()) == len(workload)
    statuses = [r.status for r in gw.records]
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) == sum(o["completed"] for o in outcomes.values())
    assert statuses.count(429) == sum(o["rejected"] for o in outcomes.values())
    assert sum(gw.gateway.rejections.values()) == statuses.count(429)
    for r in gw.records:
        if r.status == 429:
            assert r.error == "rejected" and r.retry_after_s is not None
            assert r.retry_after_s >= 1.0  # min_retry_after_s in the example
            assert r.e2e_s is not None and r.e2e_s >= 0
        else:
            assert r.ok and r.completion_tokens in (128, 256)
    assert gw.gateway.in_flight_requests == 0 and not any(gw.gateway.queue_depth.values())


def test_an_idle_gateway_adds_no_delay() -> None:
    """Light load: nothing queues at the gateway, so TTFT is the engine's own, exactly."""
    specs = [RequestSpec(f"r{i}", i * 1.0, 512, 64) for i in range(30)]
    workload = Workload.from_specs(specs)
    direct = simulate(workload, ENGINE, H100)
    gw = simulate_gateway(workload, ENGINE, H100, GatewayConfig())
    assert [r.ttft_s for r in gw.records] == pytest.approx([r.ttft_s for r in direct.records])
    assert {r.priority_class for r in gw.records} == {"standard"}  # the default class


def test_an_unsorted_workload_runs_as_its_sorted_self() -> None:
    """Arrivals go on the heap one at a time only when the workload is sorted; one that is
    not (built column by column) is scheduled all at once, and runs as its sorted copy."""
    specs = burst_workload(burst=100).specs()
    ordered = Workload.from_specs(list(specs))
    shuffled = np.random.default_rng(3).permutation(len(ordered))
    unsorted = Workload(
        arrival_s=ordered.arrival_s[shuffled], prompt_tokens=ordered.prompt_tokens[shuffled],
        output_tokens=ordered.output_tokens[shuffled], ids=ordered.ids[shuffled],
        priority_class=ordered.priority_class[shuffled],
    )  # fmt: skip
    assert not np.all(np.diff(unsorted.arrival_s) >= 0)
    config = GatewayConfig.load(EXAMPLE)
    a = simulate_gateway(ordered, ENGINE, H100, config)
    b = simulate_gateway(unsorted, ENGINE, H100, config)
    assert sorted(r.to_json() for r in a.records) == sorted(r.to_json() for r in b.records)


def test_the_gc_is_off_while_the_heap_runs_and_as_it_was_after() -> None:
    """A long run's live records are not scanned by the cyclic GC (`EventHeap.run`)."""
    seen: list[bool] = []
    for was in (True, False):
        (gc.enable if was else gc.disable)()
        heap = EventHeap()
        heap.at(1.0, 0, lambda now: seen.append(gc.isenabled()))
        heap.run()
        assert gc.isenabled() is was
    gc.enable()
    assert seen == [False, False]


def test_what_a_run_leaves_alive_is_not_walked_by_the_young_collections() -> None:
    """What a run made and kept goes to the oldest generation, unscanned: the young
    collection after a day's run walked millions of records (`EventHeap.run`)."""
    kept: list[list[int]] = []
    heap = EventHeap()
    heap.at(1.0, 0, lambda now: kept.extend([i] for i in range(1000)))
    gc.collect()
    heap.run()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in kept)
    assert gc.get_count()[0] < 100


def test_a_process_that_froze_objects_keeps_them_frozen() -> None:
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        heap = EventHeap()
        heap.at(1.0, 0, lambda now: None)
        heap.run()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_finished_simulation_goes_with_its_last_reference() -> None:
    """Its per-request tables are freed when the run returns, not left in the oldest
    generation for a full collection that a `tune` worker may not reach for many runs:
    nothing holds the simulation in a cycle once it is over (`ReplicaSet.detach`)."""
    from burstguard.core.scaling import load_policy

    def books() -> int:
        return sum(type(o).__name__ == "RecordBook" for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        kpa = load_policy("kpa").with_overrides(max_replicas=4)
        simulate_gateway(burst_workload(burst=60), ENGINE, H100, GatewayConfig(), 1, scaling=kpa)
        simulate(burst_workload(burst=60), ENGINE, H100)
        assert books() == 0
    finally:
        gc.enable()


def test_the_same_run_gives_the_same_decisions() -> None:
    workload = burst_workload(burst=300)
    config = GatewayConfig.load(EXAMPLE)
    a = simulate_gateway(workload, ENGINE, H100, config)
    b = simulate_gateway(workload, ENGINE, H100, config)
    assert [r.to_json() for r in a.records] == [r.to_json() for r in b.records]


def test_long_idle_gaps_are_skipped() -> None:
    """A day between two requests costs no ticks: the clock jumps over idle time."""
    specs = [RequestSpec("a", 0.0, 100, 8), RequestSpec("b", 86_400.0, 100, 8)]
    gw = simulate_gateway(Workload.from_specs(specs), ENGINE, H100, GatewayConfig())
    assert [r.status for r in gw.records] == [200, 200]
    assert gw.end_s > 86_400.0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=120)


SIM = ("sim", "--pattern", "burst", "--rate", "16", "--duration", "30", "--burst-size",
       "150-300", "--classes", "interactive=0.2,standard=0.2,batch=0.6", "--prompt-tokens",
       "uniform:200-1000", "--output-tokens", "256", "--max-num-seqs", "64")  # fmt: skip


def test_cli_prints_and_writes_per_class_outcomes(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = run(*SIM, "--gateway", str(EXAMPLE), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "interactive" in proc.stdout and "TTFT p95" in proc.stdout
    summary = json.loads(out.read_text())
    classes = summary["gateway"]["classes"]
    assert list(classes) == ["interactive", "standard", "batch"]
    assert sum(c["requests"] for c in classes.values()) == summary["requests"]
    assert sum(c["rejected"] for c in classes.values()) == summary["errors"] > 0
    assert classes["batch"]["rejected"] > classes["interactive"]["rejected"]
    # the example's standard and batch classes are preemptible: the burst preempts them
    gw = summary["gateway"]
    assert gw["preemptions"] == sum(c["preemptions"] for c in classes.values()) > 0
    assert gw["reprefill_tokens"] > 0 and "preempted" in proc.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read the gateway config"),
        ("classes: [\n", "not valid YAML"),
        ("admission:\n  max_in_flight: 0\n", "admission.max_in_flight"),
    ],
)
def test_cli_reports_a_bad_gateway_config(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "gw.yaml"
    if text is not None:
        path.write_text(text)
    proc = run(*SIM, "--gateway", str(path))
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_hop_latency_adds_to_what_every_client_saw_and_nothing_else() -> None:
    """`--hop-latency-s`: the serving path's own latency outside the engine moves every
    TTFT and E2E by exactly that much; token gaps and outcomes stay as simulated."""
    from burstguard.sim.loop import add_hop_latency

    workload = burst_workload(burst=100)
    config = GatewayConfig.load(EXAMPLE)
    base = simulate_gateway(workload, ENGINE, H100, config).records
    moved = simulate_gateway(workload, ENGINE, H100, config).records
    add_hop_latency(moved, 0.01)
    assert any(r.status == 429 for r in base) and any(r.ok for r in base)
    for a, b in zip(base, moved, strict=True):
        assert (a.status, a.itl_s) == (b.status, b.itl_s)
        if a.ttft_s is not None:
            assert b.ttft_s == pytest.approx(a.ttft_s + 0.01)
        if a.e2e_s is not None:
            assert b.e2e_s == pytest.approx(a.e2e_s + 0.01)
    proc = run("sim", "--concurrency", "2", "--duration", "5", "--hop-latency-s", "0.01")
    assert proc.returncode == 2 and "open-loop" in proc.stderr + proc.stdout
    proc = run("sim", "--pattern", "poisson", "--duration", "5", "--hop-latency-s", "-1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
