"""A hung backend behind `burstguard gateway`: two emulators, one SIGSTOPped (the process
stopped, its sockets open: no reset, no refusal) with 20 streams in flight.

- the requests on it with no first token are answered by the other emulator within the
  first-token deadline + 1 s;
- the streams on it that had tokens resume on the other emulator with the text so far
  (`resume: true`: every token once) or, where the backend cannot resume, end with one
  in-band error event, within the stall deadline + 1 s;
- nothing waits `read_timeout_s`.

And a slow but healthy long prefill (the CPU profile: 3.4 ms a prompt token) is not cut:
its deadline comes from the prefill work predicted at the backend's learned rate; the same
request under a constant deadline of the floor is cut.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import StreamAnswer, read_stream, start_emulator, start_fleet_gateway

from burstguard.core.engine.profile import PROFILES_DIR

FLOOR_S, STALL_S = 2.0, 2.0
MAX_TOKENS = 300
MODEL = "smollm2-135m-cpu"


def log_lines(tmp_path: Path, base: str) -> list[dict[str, Any]]:
    text = (tmp_path / f"gateway-{base.rsplit(':', 1)[1]}.log").read_text()
    return [json.loads(x) for x in text.splitlines() if x.startswith('{"id"')]


@pytest.mark.parametrize("resume", [True, False])
async def test_a_sigstopped_backend_with_20_streams_in_flight(tmp_path: Path, resume: bool) -> None:
    procs = [start_emulator(tmp_path, speedup=1.0) for _ in range(2)]
    for p in procs:
        p.start()
    urls = [p.base_url for p in procs]  # type: ignore[attr-defined]
    config = {
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 60.0}],
        "backends": [{"url": u, "resume": resume} for u in urls],
        "fleet": {"router": {"policy": "round_robin"}},
        "backend_deadlines": {"first_token_floor_s": FLOOR_S, "stall_s": STALL_S},
    }
    gw = start_fleet_gateway(tmp_path, [], config)
    gw.start()
    base = gw.base_url  # type: ignore[attr-defined]
    body = {"model": "llama3-8b-h100", "prompt": "hi " * 40, "max_tokens": MAX_TOKENS,
            "ignore_eos": True, "stream": True}  # fmt: skip
    victim = procs[0].proc
    assert victim is not None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            started = [asyncio.create_task(read_stream(session, base, body)) for _ in range(10)]
            await asyncio.sleep(1.0)  # these hold tokens
            long = {**body, "prompt": "hi " * 3000}  # ~0.5 s of prefill: no first token yet
            fresh = [asyncio.create_task(read_stream(session, base, long)) for _ in range(10)]
            await asyncio.sleep(0.05)
            os.killpg(victim.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                answers = await asyncio.wait_for(asyncio.gather(*started, *fresh), 40)
            finally:
                os.killpg(victim.pid, signal.SIGCONT)
            lines = log_lines(tmp_path, base)
    finally:
        gw.stop()
        for p in procs:
            p.stop()
    assert all(a.status == 200 for a in answers)
    moved = [x for x in lines if len(x["backends"]) > 1]
    assert len(moved) >= (8 if resume else 3), "the stopped emulator held about half of them"
    late = [a for a in answers[10:] if a.times and a.times[0] > stopped]
    waited = [a.times[0] - stopped for a in late]
    assert late and max(waited) <= FLOOR_S + 1.0, waited
    gaps = [max(b - a for a, b in zip(x.times, x.times[1:], strict=False)) for x in answers[:10]]
    if resume:
        assert all(a.done and a.errors == 0 for a in answers), "a stream was lost"
        assert all(len(a.times) == MAX_TOKENS for a in answers), "a token was lost or doubled"
        assert max(gaps) <= STALL_S + 1.0, gaps
        assert sum(x["failover_resumes"] for x in moved) >= 3
    else:
        cut = [a for a in answers if not a.done]
        assert cut and all(a.times and a.errors == 1 for a in cut)
        assert all(a.times[-1] - stopped <= STALL_S + 1.0 for a in cut)
        assert all(x["outcome"] == "failed" for x in lines if x["id"] and x["reason"])
    assert time.monotonic() - stopped < 30, "something waited for read_timeout_s"


async def test_a_slow_but_healthy_long_prefill_is_not_cut(tmp_path: Path) -> None:
    """CPU profile, 1,500 prompt tokens: ~5 s of prefill against a 1 s floor. Learned from
    one short request first, the deadline is 4 x the predicted ~7 s; with a constant 1 s
    deadline (factor 1, an infinitely fast prior, nothing learned) the same request is cut:
    504, as its only backend is the one that held it."""
    # the packaged profile by its path: this machine's own calibration would stand in for
    # the name, and a faster fit makes the prefill too short to test anything
    packaged = str(PROFILES_DIR / "smollm2-135m-cpu.yaml")
    slow = start_emulator(tmp_path, profile=packaged, speedup=1.0)
    slow.start()
    url = slow.base_url  # type: ignore[attr-defined]

    async def run(
        deadlines: dict[str, float], warm: bool
    ) -> tuple[StreamAnswer, list[dict[str, Any]]]:
        config = {"classes": [{"name": "standard", "rank": 0}],
                  "backend_deadlines": {"first_token_floor_s": 1.0, **deadlines}}  # fmt: skip
        gw = start_fleet_gateway(tmp_path, [url], config)
        gw.start()
        base = gw.base_url  # type: ignore[attr-defined]
        try:
            async with aiohttp.ClientSession() as session:
                if warm:  # the backend's rate is learned from its first answers
                    short = {"model": MODEL, "prompt": "x " * 100, "max_tokens": 4,
                             "stream": True}  # fmt: skip
                    assert (await read_stream(session, base, short)).done
                long = {"model": MODEL, "prompt": "word " * 1500, "max_tokens": 8, "stream": True}
                answer = await read_stream(session, base, long)
        finally:
            gw.stop()
        return answer, log_lines(tmp_path, base)

    try:
        answer, lines = await run({}, warm=True)
        assert answer.status == 200 and answer.done and answer.times
        assert answer.times[0] - answer.sent > 3.0  # it was slow, and was not cut
        assert lines[-1]["outcome"] == "completed" and len(lines[-1]["backends"]) == 1
        constant = {"first_token_factor": 1.0, "prefill_tokens_per_s": 1e9}
        cut, lines = await run(constant, warm=False)
        assert cut.status == 504 and lines[-1]["outcome"] == "failed"
        assert lines[-1]["reason"] == "backend_timeout+no_backend"
    finally:
        slow.stop()
