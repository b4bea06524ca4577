"""One core, two clocks: the HTTP emulator (real clock) and the simulator (virtual clock)
give the same TTFT distribution on the same workload.

A client measures wall time x speedup, so everything the host adds — HTTP parsing, a
burst's arrivals handled one by one, one SSE chunk per token per stream — is multiplied by
the speedup. The emulator keeps up at 20x when a step lasts milliseconds of wall time
(smollm2-135m-cpu, ~64 ms per engine step) but not on llama3-8b-h100 (a 6.5 ms decode step
is 0.3 ms of wall time: measured at 20x, delivery lag p50 0.27 s of engine time and TTFT
p50 +42%; `burstguard_emulator_lag_seconds` shows it), so the H100 case runs at 2.5x.
A smaller token budget (512) spreads a burst's prefills over many steps; with all of
them in one multi-second step, TTFT is two plateaus and p50 flips between them on which
step a request lands in (measured: +37% on one seed at 8192). The burst arrives over 2 s
of engine time (0.1 s of wall time): accepting 24 simultaneous requests one by one costs
the host a few wall milliseconds each, x20 (measured without the spread: p50 +6..13%).
Measured with both: p50 +4..7%, p95 +1% with a profile of 0.9 ms per prefill token;
+0.8% / +0.7% with the current fit (3.5 ms: longer waits, the same host overhead); the
H100 case at 2.5x: p50 +1..6%, p95 +0.5..2%."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import requests
from tests.conftest import start_emulator

from burstguard.bench.summary import summarize
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.scrape import metric_sum, parse_metrics
from burstguard.sim.loop import simulate
from burstguard.wire.tokens import filler_text
from burstguard.workload.synth import PatternSpec, synthesize


@dataclass(frozen=True)
class Case:
    profile: str
    speedup: float
    max_num_batched_tokens: int
    spec: PatternSpec


CASES = {
    "h100-2.5x": Case("llama3-8b-h100", 2.5, 8192, PatternSpec(
        pattern="burst", rate=4.0, duration_s=60, seed=5,
        prompt_tokens="uniform:500-1500", output_tokens="64",
    )),
    "smollm2-cpu-20x": Case("smollm2-135m-cpu", 20.0, 512, PatternSpec(
        pattern="burst", rate=0.5, duration_s=200, seed=6, burst_spread_s=2.0,
        prompt_tokens="uniform:100-400", output_tokens="32",
    )),
}  # fmt: skip


async def replay(
    base: str, case: Case, arrivals: list[float], prompts: list[int], outputs: list[int]
) -> list[float]:
    """Open loop at the scheduled (engine-time / speedup) instants; TTFT in engine time."""
    speedup = case.speedup
    ttfts: list[float] = [0.0] * len(arrivals)
    async with aiohttp.ClientSession() as session:
        t0 = time.monotonic() + 0.2

        async def one(i: int) -> None:
            await asyncio.sleep(max(0.0, t0 + arrivals[i] / speedup - time.monotonic()))
            sent = time.monotonic()
            body = {"model": case.profile, "prompt": filler_text(prompts[i]),
                    "max_tokens": outputs[i], "ignore_eos": True, "stream": True}  # fmt: skip
            async with session.post(base + "/v1/completions", json=body) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {") and b'"text":""' not in line:
                        ttfts[i] = (time.monotonic() - sent) * speedup
                        break
                async for _ in resp.content:
                    pass

        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(len(arrivals)))), 60)
    return ttfts


@pytest.mark.parametrize("name", list(CASES))
def test_emulator_and_sim_agree_on_ttft(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    workload = synthesize(case.spec)
    config = EngineConfig(max_num_seqs=16, max_num_batched_tokens=case.max_num_batched_tokens)
    sim = simulate(workload, config, Profile.load(case.profile))
    sim_ttft = summarize(sim.records, duration_s=case.spec.duration_s, source="sim")["ttft_s"]
    flags = ("--max-num-seqs", "16", "--max-num-batched-tokens", str(config.max_num_batched_tokens))
    with start_emulator(tmp_path, *flags, profile=case.profile, speedup=case.speedup) as proc:
        base = proc.base_url  # type: ignore[attr-defined]
        live = asyncio.run(replay(
            base, case, workload.arrival_s.tolist(), workload.prompt_tokens.tolist(),
            workload.output_tokens.tolist(),
        ))  # fmt: skip
        samples = parse_metrics(requests.get(base + "/metrics", timeout=5).text)
    lag_sum = metric_sum(samples, "burstguard_emulator_lag_seconds_sum") or 0.0
    lag_count = metric_sum(samples, "burstguard_emulator_lag_seconds_count") or 1.0
    p50, p95 = np.percentile(live, [50, 95])
    print(f"{name}: {len(workload)} requests; TTFT p50 sim {sim_ttft['p50']:.3f} s vs "
          f"emulator {p50:.3f} s; p95 sim {sim_ttft['p95']:.3f} s vs emulator {p95:.3f} s; "
          f"mean delivery lag {lag_sum / lag_count * 1000:.1f} ms of engine time")  # fmt: skip
    assert abs(p50 - sim_ttft["p50"]) <= 0.10 * sim_ttft["p50"]
    assert abs(p95 - sim_ttft["p95"]) <= 0.10 * sim_ttft["p95"]
