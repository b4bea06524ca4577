"""One policy, two clocks: the same gateway config on the same workload decides the same in
`burstguard sim --gateway` (virtual time) and in the live gateway in front of the emulator.

The emulator runs at real speed (1x) so that the gateway's own timings (queue deadlines,
the 50 ms tick) mean the same seconds on both sides. What may differ is timing noise: HTTP
hops, the scrape phase, a loaded CI box; the bounds below are sized for that. Since the
server and the simulator speak one driver protocol (`GatewayCore.handle`), the bounds are
tight: measured, 61 vs 60 shed, per class within 1, TTFT p95 within 0.02 s.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from tests.conftest import start_emulator
from tests.integration.test_gateway import start_gateway

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.wire.tokens import filler_text
from burstguard.workload.spec import RequestSpec, Workload

PROFILE = "llama3-8b-h100"
SEQS = 16
CONFIG: dict[str, Any] = {
    "classes": [
        {"name": "interactive", "rank": 0, "ttft_target_s": 1.0, "queue_deadline_s": 4.0},
        {"name": "standard", "rank": 1, "queue_deadline_s": 8.0},
        {"name": "batch", "rank": 2, "queue_deadline_s": 2.0, "max_in_flight_fraction": 0.5},
    ],
    "admission": {"max_in_flight": SEQS, "min_in_flight": 1, "adapt": False},
    "log_requests": False,
}
MIX = ["interactive", "standard", "batch", "batch", "batch"]


def workload() -> Workload:
    """1 req/s for 14 s plus a burst of 100 within 1 s at t=2: ~4x what the engine drains."""
    rng = np.random.default_rng(3)
    specs = [
        RequestSpec(f"s{i}", 0.5 + i, int(rng.integers(300, 800)), 96, MIX[i % 5])
        for i in range(14)
    ]
    specs += [
        RequestSpec(f"b{j}", 2.0 + j / 100, int(rng.integers(300, 800)), 128, MIX[(j * 3) % 5])
        for j in range(100)
    ]
    return Workload.from_specs(specs)


async def replay(base: str, wl: Workload) -> list[tuple[int, float | None]]:
    """Open loop at the scheduled instants: (status, TTFT) per request."""
    out: list[tuple[int, float | None]] = [(0, None)] * len(wl)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(session.get(base + "/health") for _ in range(32)))
        t0 = time.monotonic() + 0.3

        async def one(i: int) -> None:
            spec = wl.spec(i)
            await asyncio.sleep(max(0.0, t0 + spec.arrival_s - time.monotonic()))
            sent = time.monotonic()
            body = {"model": PROFILE, "prompt": filler_text(spec.prompt_tokens),
                    "max_tokens": spec.max_tokens, "ignore_eos": True, "stream": True}  # fmt: skip
            headers = {"x-burstguard-class": str(spec.priority_class)}
            async with session.post(base + "/v1/completions", json=body, headers=headers) as resp:
                ttft = None
                async for line in resp.content:
                    if ttft is None and line.startswith(b"data: {") and b'"text":""' not in line:
                        ttft = time.monotonic() - sent
                out[i] = (resp.status, ttft)

        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(len(wl)))), 90)
    return out


def per_class(wl: Workload, results: list[tuple[int, float | None]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for cls in ("interactive", "standard", "batch"):
        mine = [results[i] for i in range(len(wl)) if wl.spec(i).priority_class == cls]
        ttft = [t for s, t in mine if s == 200 and t is not None]
        table[cls] = {
            "n": len(mine),
            "shed": sum(1 for s, _ in mine if s == 429),
            "p50": float(np.percentile(ttft, 50)) if ttft else None,
            "p95": float(np.percentile(ttft, 95)) if ttft else None,
        }
    return table


def test_sim_and_live_gateway_decide_the_same(tmp_path: Path) -> None:
    wl = workload()
    config = GatewayConfig.from_dict({**CONFIG, "backends": [{"url": "http://unused"}]})
    sim = simulate_gateway(wl, EngineConfig(max_num_seqs=SEQS), Profile.load(PROFILE), config)
    sim_table = per_class(wl, [(r.status or 0, r.ttft_s) for r in sim.records])
    with start_emulator(tmp_path, "--max-num-seqs", str(SEQS), speedup=1.0) as emu:
        gw = start_gateway(tmp_path, emu.base_url, CONFIG)  # type: ignore[attr-defined]
        with gw:
            live = asyncio.run(replay(gw.base_url, wl))  # type: ignore[attr-defined]
    assert {s for s, _ in live} <= {200, 429}
    live_table = per_class(wl, live)
    for cls in sim_table:
        s, v = sim_table[cls], live_table[cls]
        print(f"{cls:<12} n {s['n']:>3}  shed sim {s['shed']:>3} live {v['shed']:>3}  "
              f"TTFT p50 sim {s['p50'] or 0:.2f} live {v['p50'] or 0:.2f} s  "
              f"p95 sim {s['p95'] or 0:.2f} live {v['p95'] or 0:.2f} s")  # fmt: skip
    sim_shed = sum(t["shed"] for t in sim_table.values())
    live_shed = sum(t["shed"] for t in live_table.values())
    assert sim_shed > 0, "the burst must overload the gateway"
    assert abs(sim_shed - live_shed) <= max(3, 0.08 * sim_shed)
    for cls in sim_table:
        s, v = sim_table[cls], live_table[cls]
        assert abs(s["shed"] - v["shed"]) <= max(3, 0.1 * s["n"]), cls
        if s["p95"] is not None and v["p95"] is not None:
            assert abs(s["p95"] - v["p95"]) <= max(0.3, 0.15 * s["p95"]), cls
    # the policy's intent holds live as in sim: batch is shed, interactive is not
    assert live_table["batch"]["shed"] > live_table["interactive"]["shed"]
