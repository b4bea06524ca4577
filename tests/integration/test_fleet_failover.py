"""A replica dies under a steady stream load behind `burstguard gateway` with three
backends: three emulators, one SIGKILLed mid-run and restarted on its port.

- no request that had not received its first token fails: the gateway fails it over and
  the client sees a normal answer;
- a stream cut on the dead replica is resumed on another (`resume: true`), or ends with
  exactly one in-band error event;
- the gateway sends the dead replica no request more than 1 s after it died (read from
  its own `burstguard_backend_routed_total{backend=...}`, polled every 50 ms);
- it is back in rotation within 2 s of answering /health again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import aiohttp
from tests.conftest import StreamAnswer, read_stream, start_emulator, start_fleet_gateway

from burstguard.procs import http_ok
from burstguard.scrape import parse_metrics

CONFIG = {
    "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 60.0}],
    "engine_speedup": 4.0,
}


async def routed(session: aiohttp.ClientSession, gateway: str, backend: str) -> float:
    async with session.get(gateway + "/metrics") as resp:
        text = await resp.text()
    return parse_metrics(text).get(f'burstguard_backend_routed_total{{backend="{backend}"}}', 0.0)


async def test_a_replica_killed_mid_run(tmp_path: Path) -> None:
    procs = [start_emulator(tmp_path, speedup=4.0) for _ in range(3)]
    for p in procs:
        p.start()
    urls = [p.base_url for p in procs]  # type: ignore[attr-defined]
    victim = urls[0]
    gw = start_fleet_gateway(
        tmp_path, urls, {**CONFIG, "backends": [{"url": urls[0], "resume": True}]}
    )
    gw.start()
    base = gw.base_url  # type: ignore[attr-defined]
    body = {"model": "llama3-8b-h100", "prompt": "hi " * 40, "max_tokens": 48,
            "ignore_eos": True, "stream": True}  # fmt: skip
    tasks: list[asyncio.Task[StreamAnswer]] = []
    sends: list[tuple[float, float]] = []  # (time, routed count of the victim)
    died_at = restart_at = back_at = 0.0
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        stop = asyncio.Event()

        async def load() -> None:  # an open loop: 25 requests/s until stopped
            while not stop.is_set():
                tasks.append(asyncio.create_task(read_stream(session, base, body)))
                await asyncio.sleep(0.04)

        async def watch() -> None:
            while not stop.is_set():
                # its label: the first --backend is backend-0 (never its URL)
                sends.append((time.monotonic(), await routed(session, base, "backend-0")))
                await asyncio.sleep(0.05)

        loader, watcher = asyncio.create_task(load()), asyncio.create_task(watch())
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
            await watcher
            answers = await asyncio.gather(*tasks)
            log = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
            gw.stop()
            for p in procs:
                p.stop()
    assert len(answers) > 150
    assert all(a.status == 200 for a in answers), "a request failed before its first token"
    cut = [a for a in answers if not a.done]
    assert all(a.tokens > 0 and a.errors == 1 for a in cut), "a stream ended without one error"
    assert all(a.errors == 0 for a in answers if a.done)
    lines = [json.loads(x) for x in log.splitlines() if x.startswith('{"id"')]
    failed_over = [x for x in lines if len(x["backends"]) > 1 and x["outcome"] == "completed"]
    assert failed_over, "no request was failed over"
    # the last increase of the victim's routed count before it restarted
    counts = [(t, n) for t, n in sends if t < restart_at]
    last_send = max(
        (t for (t, n), (_, prev) in zip(counts[1:], counts, strict=False) if n > prev), default=0.0
    )
    assert last_send - died_at <= 1.0 + 0.05, (
        f"sent to the dead replica {last_send - died_at:.2f} s after"
    )
    before = next(n for t, n in sends if t >= back_at)
    back = next(t for t, n in sends if t >= back_at and n > before)
    assert back - back_at <= 2.0
    resumed = sum(1 for x in failed_over if x["failover_resumes"])
    print(
        f"\n{len(answers)} requests, {len(failed_over)} failed over ({resumed} of them "
        "resumed after their first token), "
        f"{len(cut)} ended with an error event; last send to the dead replica "
        f"{last_send - died_at:.2f} s after the kill; back {back - back_at:.2f} s after /health"
    )
