"""SIGTERM with a queue and streams: 2 slots, 30 streamed 2,048-token chats, SIGTERM after
3 s, a 2 s drain. Every client gets an answer: the queued ones a 503 with Retry-After at
once (none of them can finish in the drain), the two streams run to the drain's end and
then end with one in-band error event and a proper end of the chunked body. No connection
reset, no EOF without an answer, no stream cut without an error event; each request's log
line has its own outcome and reason (`rejected`/`failed`, `shutdown`, never `cancelled`)
and the tokens its client received."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import start_emulator, start_fleet_gateway

N, SLOTS, DRAIN_S = 30, 2, 2.0


@dataclass
class Seen:
    status: int = 0
    retry_after: str | None = None
    tokens: int = 0
    errors: list[str] | None = None
    done: bool = False
    broken: str | None = None  # a reset, an EOF without an answer, a truncated body
    rid: str | None = None


async def chat(session: aiohttp.ClientSession, url: str) -> Seen:
    body = {"model": "llama3-8b-h100", "max_tokens": 2048, "ignore_eos": True, "stream": True,
            "messages": [{"role": "user", "content": "tell me everything"}]}  # fmt: skip
    out = Seen(errors=[])
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            out.status, out.rid = resp.status, resp.headers.get("x-request-id")
            out.retry_after = resp.headers.get("retry-after")
            if resp.status != 200:
                await resp.json()
                return out
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    out.done = True
                    continue
                event = json.loads(data)
                if "error" in event:
                    assert out.errors is not None
                    out.errors.append(event["error"]["code"])
                elif event["choices"] and event["choices"][0]["delta"].get("content"):
                    out.tokens += 1
    except (TimeoutError, aiohttp.ClientError) as exc:
        out.broken = f"{type(exc).__name__}: {exc}"
    return out


async def test_sigterm_answers_every_client(tmp_path: Path) -> None:
    emu = start_emulator(tmp_path, speedup=1.0)  # 2,048 tokens: ~15 s, longer than all this
    emu.start()
    config: dict[str, Any] = {
        "drain_s": DRAIN_S,
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 600.0}],
        "admission": {"max_in_flight": SLOTS, "min_in_flight": 1, "adapt": False},
    }
    gw = start_fleet_gateway(tmp_path, [emu.base_url], config)  # type: ignore[attr-defined]
    gw.start()
    base = gw.base_url  # type: ignore[attr-defined]
    assert gw.proc is not None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            tasks = [asyncio.create_task(chat(session, base)) for _ in range(N)]
            await asyncio.sleep(3.0)
            os.killpg(gw.proc.pid, signal.SIGTERM)
            stopped = time.monotonic()
            seen = await asyncio.gather(*tasks)
            took = time.monotonic() - stopped
        gw.proc.wait(timeout=30)
    finally:
        gw.stop()
        emu.stop()
    log = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
    lines = {x["id"]: x for x in (json.loads(t) for t in log.splitlines() if t.startswith('{"id"'))}
    assert [s.broken for s in seen if s.broken] == []
    assert len(lines) == N, "every request has exactly one log line"
    queued = [s for s in seen if s.status == 503]
    streams = [s for s in seen if s.status == 200]
    assert len(streams) == SLOTS and len(queued) == N - SLOTS
    assert all(s.retry_after is not None and int(s.retry_after) >= 1 for s in queued)
    for s in streams:  # cut at the drain's end: one error event, then a proper end
        assert s.tokens > 0 and s.errors == ["shutdown"] and not s.done
    assert took <= DRAIN_S + 1.5
    for s in seen:
        line = lines[s.rid]
        assert line["reason"] == "shutdown", line
        assert line["outcome"] == ("rejected" if s.status == 503 else "failed")
        assert line["status"] == s.status
        assert line["output_tokens"] == s.tokens  # what its client received
