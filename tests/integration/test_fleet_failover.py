"""A replica dies under a steady stream load, routed by `Fleet` through a minimal driver
(what the gateway's shell will do): three emulators, one SIGKILLed mid-run and restarted.

- no request that had not received its first token fails: it is failed over;
- a stream cut on the dead replica ends with an error (not retried after its first token);
- no request is sent to the dead replica more than 1 s after it died (until it restarts);
- it is back in rotation within 2 s of answering /health again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from tests.conftest import start_emulator

from burstguard.gateway.fleet.config import FleetConfig
from burstguard.gateway.fleet.fleet import Fleet
from burstguard.gateway.fleet.probe import HealthProber
from burstguard.gateway.fleet.router import RouteRequest
from burstguard.procs import http_ok


@dataclass
class Outcome:
    sends: list[tuple[str, float]] = field(default_factory=list)  # (backend, time)
    first_token: bool = False
    ok: bool = False


async def _request(
    fleet: Fleet, session: aiohttp.ClientSession, rid: str, body: dict[str, object]
) -> Outcome:
    out = Outcome()
    url = fleet.route(rid, RouteRequest(100), time.monotonic())
    while url is None:
        await asyncio.sleep(0.01)
        url = fleet.route(rid, RouteRequest(100), time.monotonic())
    while True:
        out.sends.append((url, time.monotonic()))
        try:
            async with session.post(url + "/v1/completions", json=body) as resp:
                if resp.status >= 500:
                    raise aiohttp.ServerDisconnectedError(f"HTTP {resp.status}")
                async for line in resp.content:
                    if line.startswith(b"data: ") and not out.first_token:
                        out.first_token = True
                        fleet.on_success(rid, time.monotonic())
                    if line.strip() == b"data: [DONE]":
                        out.ok = True
            if not out.ok:
                raise aiohttp.ClientPayloadError("stream ended without [DONE]")
            fleet.on_done(rid, time.monotonic())
            return out
        except aiohttp.ClientConnectorError:
            reason = "connect"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            reason = "reset"
        answer = fleet.on_failure(rid, reason, time.monotonic(), retryable=not out.first_token)
        if answer.backend is None:
            return out
        url = answer.backend


async def test_a_replica_killed_mid_run(tmp_path: Path) -> None:
    procs = [start_emulator(tmp_path, speedup=4.0) for _ in range(3)]
    for p in procs:
        p.start()
    urls = [p.base_url for p in procs]  # type: ignore[attr-defined]
    victim = urls[0]
    model = json.loads(urllib.request.urlopen(victim + "/v1/models").read())["data"][0]["id"]
    body = {"model": model, "prompt": "hi " * 40, "max_tokens": 48, "ignore_eos": True,
            "stream": True}  # fmt: skip
    fleet = Fleet(FleetConfig(), urls, now=time.monotonic())
    tasks: list[asyncio.Task[Outcome]] = []
    died_at = restart_at = back_at = 0.0
    async with aiohttp.ClientSession() as session:
        prober = HealthProber(fleet, session)
        prober.start()
        stop = asyncio.Event()

        async def load() -> None:  # an open loop: 25 requests/s until stopped
            i = 0
            while not stop.is_set():
                tasks.append(asyncio.create_task(_request(fleet, session, f"r{i}", body)))
                i += 1
                await asyncio.sleep(0.04)

        loader = asyncio.create_task(load())
        try:
            await asyncio.sleep(2.0)
            os.killpg(procs[0].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            died_at = time.monotonic()
            await asyncio.sleep(2.0)
            port = int(victim.rsplit(":", 1)[1])
            procs[0] = start_emulator(tmp_path, speedup=4.0, port=port)
            restart_at = time.monotonic()
            await asyncio.to_thread(procs[0].start)  # returns within 0.1 s of /health
            back_at = time.monotonic()
            assert http_ok(victim + "/health")
            await asyncio.sleep(3.0)
        finally:
            stop.set()
            await loader
            outcomes = await asyncio.gather(*tasks)
            await prober.stop()
            for p in procs:
                p.stop()
    assert len(outcomes) > 150
    failed = [o for o in outcomes if not o.ok]
    assert all(o.first_token for o in failed), "a request failed before its first token"
    assert all(o.sends[-1][0] == victim for o in failed)  # only streams cut by the kill
    to_victim = [t for o in outcomes for u, t in o.sends if u == victim]
    late = [t - died_at for t in to_victim if died_at < t < restart_at]
    assert all(dt <= 1.0 for dt in late), f"sent to the dead replica {max(late):.2f} s after"
    failed_over = [o for o in outcomes if len(o.sends) > 1 and o.ok]
    assert failed_over, "no request was failed over"
    returned = [t for t in to_victim if t > back_at]
    assert returned and min(returned) - back_at <= 2.0
    print(
        f"\n{len(outcomes)} requests, {len(failed)} cut mid-stream, {len(failed_over)} failed "
        f"over; last send to the dead replica {max(late, default=0):.2f} s after the kill; "
        f"back {min(returned) - back_at:.2f} s after /health answered"
    )
