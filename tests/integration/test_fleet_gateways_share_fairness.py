"""Two `burstguard gateway` processes share tenant fairness through a real redis-server:
gateway A serves tenant `heavy` a sustained load on its engine while gateway B, with one
slot on its own engine, holds a burst of `heavy` and `light` requests. B's VTC counts
what A served heavy (learned at each sync), so B serves light first; counting only its
own service it would alternate."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import start_emulator, start_fleet_gateway
from tests.integration.test_fleet_shared_state import redis_server  # noqa: F401

from burstguard.redis_server import RedisServer

SPEEDUP = 10.0
SMALL = {"model": "llama3-8b-h100", "prompt": "hello " * 20, "max_tokens": 16, "ignore_eos": True}
LARGE = {**SMALL, "prompt": "hello " * 400, "max_tokens": 64}


def _config(redis_url: str, **admission: Any) -> dict[str, Any]:
    return {
        "engine_speedup": SPEEDUP,
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}],
        "policy": {"fairness": "vtc"},
        "admission": {"adapt": False, **admission},
        "fleet": {"redis": {"url": redis_url, "replicas": 2, "sync_interval_s": 0.1}},
    }


async def _post(session: aiohttp.ClientSession, base: str, tenant: str, body: dict) -> None:
    async with session.post(base + "/v1/completions", json=body,
                            headers={"x-burstguard-tenant": tenant}) as resp:  # fmt: skip
        await resp.read()
        assert resp.status == 200, resp.status


async def test_a_tenant_served_through_one_gateway_goes_behind_at_the_other(
    redis_server: RedisServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    engines = [start_emulator(tmp_path, speedup=SPEEDUP) for _ in range(2)]
    for e in engines:
        e.start()
    a, b = (e.base_url for e in engines)  # type: ignore[attr-defined]
    gw_a = start_fleet_gateway(tmp_path, [a], _config(redis_server.url))
    gw_b = start_fleet_gateway(tmp_path, [b], _config(redis_server.url, max_in_flight=1,
                                                      min_in_flight=1))  # fmt: skip
    gw_a.start()
    gw_b.start()
    base_a, base_b = gw_a.base_url, gw_b.base_url  # type: ignore[attr-defined]
    done: list[str] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            for tenant in ("heavy", "light"):  # B knows both (its idle LRU) ...
                await _post(session, base_b, tenant, SMALL)
            await asyncio.sleep(0.3)  # ... and has read their fleet totals once (a baseline)
            stop = time.monotonic() + 20

            async def heavy_at_a() -> None:
                while time.monotonic() < stop:
                    await _post(session, base_a, "heavy", LARGE)

            load = [asyncio.create_task(heavy_at_a()) for _ in range(8)]
            await asyncio.sleep(0.5)

            async def at_b(tenant: str) -> None:
                await _post(session, base_b, tenant, SMALL)
                done.append(tenant)

            burst = [at_b(("heavy", "light")[i % 2]) for i in range(20)]  # heavy first
            await asyncio.gather(*burst)
            stop = 0.0
            await asyncio.gather(*load)
    finally:
        for p in (gw_a, gw_b, *engines):
            p.stop()
    first = done[:10]
    print(f"\nB's completion order: {done}")
    # B's first pick after an idle spell lifts light to heavy's counter (VTC: idleness
    # banks no credit); from the next sync on, A's service of heavy keeps it behind
    assert first.count("light") >= 8, done
