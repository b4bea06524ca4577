"""Active probes against real servers: a replica that dies leaves rotation within 1 s and is
back within 2 s of answering again; a 503 /health counts as down."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from burstguard.core.fleet.config import FleetConfig
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.router import RouteRequest
from burstguard.live.gateway.probe import HealthProber, probe
from burstguard.procs import free_port


async def _start(port: int, status: int = 200) -> web.AppRunner:
    async def health(_: web.Request) -> web.Response:
        return web.Response(status=status, text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def _routable(fleet: Fleet, url: str) -> bool:
    return url in {v.url for v in fleet.views(time.monotonic())}


async def _wait(cond_ok: bool, fleet: Fleet, url: str, limit_s: float) -> float:
    start = time.monotonic()
    while _routable(fleet, url) != cond_ok:
        assert time.monotonic() - start < limit_s + 3, "no change in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def test_dead_replica_leaves_and_returns_within_bounds() -> None:
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    runners = [await _start(p) for p in ports]
    fleet = Fleet(FleetConfig(), urls, now=time.monotonic())
    async with aiohttp.ClientSession() as session:
        prober = HealthProber(fleet, session)
        prober.start()
        try:
            await asyncio.sleep(0.3)
            assert _routable(fleet, urls[0]) and fleet.ready(time.monotonic())
            await runners[0].cleanup()  # the replica dies: connections refused
            gone_after = await _wait(False, fleet, urls[0], 1.0)
            assert gone_after <= 1.0
            assert fleet.ready(time.monotonic())  # the other one still serves
            assert all(fleet.route(f"r{i}", RouteRequest(1), time.monotonic()) == urls[1]
                       for i in range(5))  # fmt: skip
            runners[0] = await _start(ports[0])  # back
            back_after = await _wait(True, fleet, urls[0], 2.0)
            assert back_after <= 2.0
            up = {s.url: s.up for s in fleet.stats(time.monotonic())}
            assert up[urls[0]]
        finally:
            await prober.stop()
            for r in runners:
                await r.cleanup()


async def test_probe_is_2xx_within_timeout() -> None:
    port = free_port()
    runner = await _start(port, status=503)
    async with aiohttp.ClientSession() as session:
        try:
            assert not await probe(session, f"http://127.0.0.1:{port}/health", 1.0)
            assert not await probe(session, f"http://127.0.0.1:{free_port()}/health", 1.0)
        finally:
            await runner.cleanup()
        ok_runner = await _start(port)
        try:
            assert await probe(session, f"http://127.0.0.1:{port}/health", 1.0)
        finally:
            await ok_runner.cleanup()


async def test_a_backend_without_health_is_up() -> None:
    """llama-cpp-python's server has no /health (404): that is not a dead backend."""

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    fleet = Fleet(FleetConfig(), [url], now=time.monotonic())
    async with aiohttp.ClientSession() as session:
        prober = HealthProber(fleet, session)
        prober.start()
        try:
            await asyncio.sleep(1.5)  # six probes: three failures would open it
            assert _routable(fleet, url)
            assert fleet.stats(time.monotonic())[0].up
        finally:
            await prober.stop()
            await runner.cleanup()
