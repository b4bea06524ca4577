"""Sim and live route alike: the same workload through `burstguard gateway` in front of
two emulators of different speeds (llama3-8b-h100 and llama3-8b-a100) and through
`simulate_gateway` with the same two replicas behind the same core and router. The share
each backend gets must agree within noise (the score router sends the faster one more)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import numpy as np
from tests.conftest import start_emulator, start_fleet_gateway

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.scrape import parse_metrics
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import RequestSpec, Workload

SPEEDUP = 4.0
CONFIG = {
    "engine_speedup": SPEEDUP,
    "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}],
    "fleet": {"router": {"policy": "score"}},
}


def workload(n: int = 300, rate: float = 40.0) -> Workload:
    """Poisson arrivals (engine seconds), 200-token prompts, 64 output tokens."""
    rng = np.random.default_rng(1)
    t, specs = 0.0, []
    for k in range(n):
        t += rng.exponential(1 / rate)
        specs.append(RequestSpec(f"r{k}", t, 200, 64))
    return Workload.from_specs(specs)


async def replay(base: str, wl: Workload) -> list[int]:
    prompt = " ".join(["hello"] * 200)
    start = time.monotonic()

    async def one(i: int, session: aiohttp.ClientSession) -> int:
        await asyncio.sleep(max(0.0, start + float(wl.arrival_s[i]) / SPEEDUP - time.monotonic()))
        body = {"model": "m", "prompt": prompt, "max_tokens": 64, "ignore_eos": True}
        async with session.post(base + "/v1/completions", json=body) as resp:
            await resp.read()
            return resp.status

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        return await asyncio.gather(*(one(i, session) for i in range(len(wl))))


async def test_sim_and_live_share_the_backends_alike(tmp_path: Path) -> None:
    wl = workload()
    fast = start_emulator(
        tmp_path, "--max-num-seqs", "16", "--served-model-name", "m", speedup=SPEEDUP
    )
    slow = start_emulator(
        tmp_path,
        "--max-num-seqs",
        "16",
        "--served-model-name",
        "m",
        profile="llama3-8b-a100",
        speedup=SPEEDUP,
    )
    with fast, slow:
        urls = [fast.base_url, slow.base_url]  # type: ignore[attr-defined]
        with start_fleet_gateway(tmp_path, urls, CONFIG) as gw:
            base = gw.base_url  # type: ignore[attr-defined]
            statuses = await replay(base, wl)
            async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
                metrics = parse_metrics(await r.text())
    assert statuses == [200] * len(wl)
    live = [metrics[f'burstguard_backend_routed_total{{backend="backend-{i}"}}'] for i in range(2)]
    live_share = live[0] / sum(live)

    h100, a100 = Profile.load("llama3-8b-h100"), Profile.load("llama3-8b-a100")
    cfg = GatewayConfig.from_dict(CONFIG)
    res = simulate_gateway(wl, EngineConfig(max_num_seqs=16), h100, cfg, 2, [h100, a100])
    assert res.routed is not None
    routed = list(res.routed.values())
    sim_share = routed[0] / sum(routed)
    print(f"\nshare of the faster backend: live {live_share:.3f}, sim {sim_share:.3f}")
    assert sim_share > 0.56  # the faster one gets more (round robin would give ~0.5)
    assert abs(live_share - sim_share) <= 0.08
