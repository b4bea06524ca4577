"""Fleet building blocks, timed: how fast active probes take a dead replica out of rotation
and bring it back, and what a Redis lease costs.

- probes: two local HTTP servers behind a `Fleet` with `HealthProber` (defaults: a probe
  every 0.25 s, 3 failures open the circuit for 1 s, 2 successes close it); one server's
  port is closed, then opened again right away; 5 rounds.
- leases: 2,000 sequential acquire + release pairs of one client against a throwaway
  `redis-server` (skipped when it is not installed).

Run: .venv/bin/python benchmarks/bench_fleet.py
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from burstguard.core.fleet.config import FleetConfig, RedisConfig
from burstguard.core.fleet.fleet import Fleet
from burstguard.live.gateway.probe import HealthProber
from burstguard.live.gateway.shared_state import SharedState
from burstguard.procs import free_port
from burstguard.redis_server import RedisServer


async def _serve(port: int) -> web.AppRunner:
    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def _until_routable(fleet: Fleet, url: str, want: bool, limit_s: float = 10.0) -> float:
    start = time.monotonic()
    while (url in {v.url for v in fleet.views(time.monotonic())}) != want:
        if time.monotonic() - start > limit_s:
            raise RuntimeError(f"{url} routable={not want} after {limit_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


async def probe_timing(rounds: int = 5) -> None:
    out, back = [], []
    for _ in range(rounds):
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        runners = [await _serve(p) for p in ports]
        fleet = Fleet(FleetConfig(), urls, now=time.monotonic())
        async with aiohttp.ClientSession() as session:
            prober = HealthProber(fleet, session)
            prober.start()
            await asyncio.sleep(0.3)
            await runners[0].cleanup()
            out.append(await _until_routable(fleet, urls[0], False))
            runners[0] = await _serve(ports[0])
            back.append(await _until_routable(fleet, urls[0], True))
            await prober.stop()
        for r in runners:
            await r.cleanup()
    print(f"dead replica out of rotation after (s): {', '.join(f'{x:.3f}' for x in out)}")
    print(f"back in rotation after it answers (s): {', '.join(f'{x:.3f}' for x in back)}")


async def lease_cost(url: str, pairs: int = 2000) -> None:
    state = SharedState(RedisConfig(url=url), "bench")
    for i in range(100):  # warm the connection and the script cache
        await state.acquire("b", f"w{i}", 8)
        await state.release("b", f"w{i}")
    t0 = time.perf_counter()
    for i in range(pairs):
        assert await state.acquire("b", f"r{i}", 8)
        await state.release("b", f"r{i}")
    per_pair = (time.perf_counter() - t0) / pairs
    await state.close()
    print(f"lease acquire + release: {per_pair * 1e6:.0f} us per pair ({pairs} pairs, one client)")


def main() -> None:
    asyncio.run(probe_timing())
    if shutil.which("redis-server") is None:
        print("redis-server not installed: lease cost skipped")
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        asyncio.run(lease_cost(server.url))


if __name__ == "__main__":
    main()
