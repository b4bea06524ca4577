"""FleetMonitor against real servers: the emulator (vLLM's metric names) and an HTTP server
exporting SGLang's names, discovered from a watched file; one is removed and drained."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from tests.conftest import serve_app

from burstguard.core.fleet.config import (
    DiscoveryConfig,
    FileDiscovery,
    FleetConfig,
    RouterConfig,
)
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.router import RouteRequest
from burstguard.live.gateway.monitor import FleetMonitor

SGLANG = (
    'sglang:num_queue_reqs{model_name="m"} 2\n'
    'sglang:num_running_reqs{model_name="m"} 7\n'
    'sglang:token_usage{model_name="m"} 0.25\n'
)


def _sglang_like(broken: dict[str, bool]) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        if broken["metrics"]:
            return web.Response(status=500, text="oops")
        return web.Response(text=SGLANG)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app


async def _until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_monitor_scrapes_probes_and_drains(emulator: str, tmp_path: Path) -> None:
    fleet = Fleet(FleetConfig(), now=time.monotonic())
    path = tmp_path / "backends.txt"
    broken = {"metrics": False}
    async with serve_app(_sglang_like(broken)) as sglang, aiohttp.ClientSession() as session:
        path.write_text(f"{emulator}\n{sglang}\n")
        mon = FleetMonitor(
            fleet,
            session,
            discovery=DiscoveryConfig(file=FileDiscovery(path=str(path), interval_s=0.05)),
        )
        try:
            assert await mon.start() == (emulator, sglang)

            def scraped_both() -> bool:
                ages = [s.metrics_age_s for s in fleet.stats(time.monotonic())]
                return len(ages) == 2 and all(a is not None and a < 1.0 for a in ages)

            await _until(scraped_both)
            views = {v.url: v for v in fleet.views(time.monotonic())}
            assert (views[sglang].waiting, views[sglang].kv_usage) == (2, 0.25)
            assert views[emulator].waiting == 0  # the emulator is idle
            assert all(s.up for s in fleet.stats(time.monotonic()))
            # failed scrapes do not refresh the last state: its age keeps growing
            broken["metrics"] = True
            await asyncio.sleep(0.1)

            def age() -> float:
                ages = {s.url: s.metrics_age_s for s in fleet.stats(time.monotonic())}
                return ages[sglang] or 0.0

            before = age()
            await asyncio.sleep(0.5)
            assert age() - before >= 0.45
            broken["metrics"] = False
            await _until(lambda: age() < 0.5)
            # put one request on the SGLang-like backend, then drop it from the file
            # (the score sends new work to the idle emulator, not to the backend with a queue)
            assert fleet.route("r0", RouteRequest(10), time.monotonic()) == emulator
            fleet.on_done("r0", time.monotonic())
            fleet.router.cfg = RouterConfig(policy="round_robin")
            routed = {fleet.route(r, RouteRequest(10), time.monotonic()): r for r in ("r1", "r2")}
            rid = routed[sglang]
            fleet.on_done(routed[emulator], time.monotonic())
            path.write_text(f"{emulator}\n")
            await _until(lambda: sglang not in {v.url for v in fleet.views(time.monotonic())})
            assert sglang in mon.scraped  # draining: still watched
            removed = fleet.on_done(rid, time.monotonic())
            assert removed == sglang
            mon.forget(removed)
            assert mon.scraped == (emulator,) and fleet.backends == (emulator,)
        finally:
            await mon.stop()
