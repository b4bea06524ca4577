"""Tenants at real `burstguard gateway` processes.

- A client choosing a new tenant id per request: the gateway refuses ids past
  `limits.max_tenant_chars` (400), queues tenants past `limits.max_queued_tenants` as one
  (`burstguard_tenant_overflow_total`) and keeps fairness state for a bounded number
  (`burstguard_fairness_tenants`).
- Two gateways share tenant fairness through a real redis-server: gateway A serves
  tenant `heavy` a sustained load on its engine while gateway B, with one slot on its own
  engine, holds a burst of `heavy` and `light` requests. B's VTC counts what A served
  heavy (learned at each sync), so B serves light first; counting only its own service it
  would alternate.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import start_emulator, start_fleet_gateway
from tests.integration.test_fleet_shared_state import redis_server  # noqa: F401

from burstguard.redis_server import RedisServer

SPEEDUP = 10.0
SMALL = {"model": "llama3-8b-h100", "prompt": "hello " * 20, "max_tokens": 16, "ignore_eos": True}
LARGE = {**SMALL, "prompt": "hello " * 400, "max_tokens": 64}
B_BURST = {**SMALL, "max_tokens": 64}


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


async def test_a_gateway_bounds_what_client_chosen_tenant_ids_hold(tmp_path: Path) -> None:
    engine = start_emulator(tmp_path, speedup=SPEEDUP)
    config = {
        "engine_speedup": SPEEDUP,
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}],
        "policy": {"fairness": "vtc"},
        "limits": {"max_tenant_chars": 64, "max_queued_tenants": 8, "max_idle_tenants": 16},
        "admission": {"adapt": False, "max_in_flight": 2, "min_in_flight": 1},
    }
    with engine:
        gw = start_fleet_gateway(tmp_path, [engine.base_url], config)  # type: ignore[attr-defined]
        with gw:
            base = gw.base_url  # type: ignore[attr-defined]
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                long_id = {"x-burstguard-tenant": "t" * 65}
                url = base + "/v1/completions"
                async with session.post(url, json=SMALL, headers=long_id) as resp:
                    refused = resp.status, await resp.json()
                await asyncio.gather(*(_post(session, base, f"spray-{i}", SMALL)
                                       for i in range(300)))  # fmt: skip
                async with session.get(base + "/metrics") as resp:
                    text = await resp.text()
    metrics = {
        (s.name, s.labels.get("class")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert refused[0] == 400, refused
    assert "longer than 64 characters" in refused[1]["error"]["message"]
    assert metrics[("burstguard_tenant_overflow_total", "standard")] > 0
    tracked = metrics[("burstguard_fairness_tenants", "standard")]
    assert 0 < tracked <= 16 + 8 + 1, tracked  # idle LRU + queued at the last pick (+ bucket)


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

            async def at_b(tenant: str) -> None:  # each about 4 syncs long at B's 1 slot
                await _post(session, base_b, tenant, B_BURST)
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
