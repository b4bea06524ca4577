"""Exact accounting: three emulators, six streams (two each, round robin); A (no resume)
and B (`resume: true`) are SIGKILLed mid-answer. A's streams end with one error event,
B's resume on C (never on A, which would start them over), C's complete. Each log line's
`output_tokens` is what its client received, and `burstguard_output_tokens_total` is their
sum (a cut stream used to log 0 and count nothing)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import aiohttp
from tests.conftest import StreamAnswer, read_stream, start_emulator, start_fleet_gateway

from burstguard.scrape import parse_metrics


async def test_cut_and_resumed_streams_are_counted_as_received(tmp_path: Path) -> None:
    procs = [start_emulator(tmp_path, speedup=1.0) for _ in range(3)]
    for p in procs:
        p.start()
    a, b, c = (p.base_url for p in procs)  # type: ignore[attr-defined]
    config = {
        "classes": [{"name": "standard", "rank": 0}],
        "backends": [{"url": a}, {"url": b, "resume": True}, {"url": c, "resume": True}],
        "fleet": {"router": {"policy": "round_robin"}},
    }
    gw = start_fleet_gateway(tmp_path, [], config)
    gw.start()
    base = gw.base_url  # type: ignore[attr-defined]
    body = {"model": "llama3-8b-h100", "prompt": "hi " * 40, "max_tokens": 400,
            "ignore_eos": True, "stream": True}  # fmt: skip
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            tasks = [asyncio.create_task(read_stream(session, base, body)) for _ in range(6)]
            await asyncio.sleep(1.5)
            for p in procs[:2]:
                assert p.proc is not None
                os.killpg(p.proc.pid, signal.SIGKILL)
            try:
                answers: list[StreamAnswer] = await asyncio.gather(*tasks)
            except aiohttp.ClientError as exc:  # what the gateway said about it, in the report
                log = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
                raise AssertionError(f"a stream broke off: {exc!r}\n{log[-6000:]}") from exc
            async with session.get(base + "/metrics") as resp:
                metrics = parse_metrics(await resp.text())
    finally:
        gw.stop()
        for p in procs:
            p.stop()
    log = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
    lines = [json.loads(t) for t in log.splitlines() if t.startswith('{"id"')]
    cut = [x for x in answers if not x.done]
    assert len(cut) >= 2 and all(x.errors == 1 and x.times for x in cut)
    assert all(len(x.times) == 400 for x in answers if x.done)
    resumed = [x for x in lines if x["failover_resumes"] and x["outcome"] == "completed"]
    assert resumed and all(x["output_tokens"] == 400 for x in resumed)
    assert not [x for x in lines if x["backends"][1:2] == ["backend-0"]]  # A: no resume
    assert sorted(x["output_tokens"] for x in lines) == sorted(len(x.times) for x in answers)
    failed = [x for x in lines if x["outcome"] == "failed"]
    assert sorted(x["output_tokens"] for x in failed) == sorted(len(x.times) for x in cut)
    assert all(x["reason"].endswith("+not_retryable") for x in failed)  # the documented form
    total = metrics['burstguard_output_tokens_total{class="standard"}']
    assert total == sum(len(x.times) for x in answers)
