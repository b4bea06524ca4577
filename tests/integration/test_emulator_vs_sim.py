"""One core, two clocks: the HTTP emulator (real clock, 2.5x) and the simulator (virtual
clock) give the same TTFT distribution on the same workload.

Wall-clock HTTP overhead is multiplied by the speedup when converted back to engine time,
so a high speedup on a shared 2-core box biases the emulator upwards (measured: 20x p50
0.629 s vs sim 0.475 s; 5x on a loaded CI box 0.552 s). At 2.5x they agree within 10%
(measured locally: p50 0.491 vs 0.475 s, p95 1.311 vs 1.303 s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np
from tests.conftest import start_emulator

from burstguard.bench.summary import summarize
from burstguard.emulator.tokens import filler_text
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.sim.loop import simulate
from burstguard.workload.synth import PatternSpec, synthesize

SPEEDUP = 2.5
ENGINE_FLAGS = ("--max-num-seqs", "16")


async def replay(
    base: str, arrivals: list[float], prompts: list[int], outputs: list[int]
) -> list[float]:
    """Open loop at the scheduled (engine-time / speedup) instants; TTFT in engine time."""
    ttfts: list[float] = [0.0] * len(arrivals)
    async with aiohttp.ClientSession() as session:
        t0 = time.monotonic() + 0.2

        async def one(i: int) -> None:
            await asyncio.sleep(max(0.0, t0 + arrivals[i] / SPEEDUP - time.monotonic()))
            sent = time.monotonic()
            body = {"model": "llama3-8b-h100", "prompt": filler_text(prompts[i]),
                    "max_tokens": outputs[i], "ignore_eos": True, "stream": True}  # fmt: skip
            async with session.post(base + "/v1/completions", json=body) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {") and b'"text":""' not in line:
                        ttfts[i] = (time.monotonic() - sent) * SPEEDUP
                        break
                async for _ in resp.content:
                    pass

        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(len(arrivals)))), 60)
    return ttfts


def test_emulator_and_sim_agree_on_ttft(tmp_path: Path) -> None:
    spec = PatternSpec(pattern="burst", rate=4.0, duration_s=60, seed=5,
                       prompt_tokens="uniform:500-1500", output_tokens="64")  # fmt: skip
    workload = synthesize(spec)
    sim = simulate(workload, EngineConfig(max_num_seqs=16), Profile.load("llama3-8b-h100"))
    sim_ttft = summarize(sim.records, duration_s=60, source="sim")["ttft_s"]
    with start_emulator(tmp_path, *ENGINE_FLAGS, speedup=SPEEDUP) as proc:
        live = asyncio.run(replay(
            proc.base_url,  # type: ignore[attr-defined]
            workload.arrival_s.tolist(), workload.prompt_tokens.tolist(),
            workload.output_tokens.tolist(),
        ))  # fmt: skip
    p50, p95 = np.percentile(live, [50, 95])
    print(f"{len(workload)} requests; TTFT p50 sim {sim_ttft['p50']:.3f} s vs emulator "
          f"{p50:.3f} s; p95 sim {sim_ttft['p95']:.3f} s vs emulator {p95:.3f} s")  # fmt: skip
    assert abs(p50 - sim_ttft["p50"]) <= 0.10 * sim_ttft["p50"]
    assert abs(p95 - sim_ttft["p95"]) <= 0.10 * sim_ttft["p95"]
