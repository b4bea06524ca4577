"""Preemption at the gateway, live: a streamed batch request holding the only slot is
preempted for an interactive one and resumed; its client reads the same text, token for
token, as the same request served alone (the emulator's text continues its prompt's, as
a greedy model's would)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import start_emulator
from tests.integration.test_gateway import samples, start_gateway

from burstguard.wire.tokens import chat_content_for, filler_text

MODEL = "llama3-8b-h100"
ONE_SLOT: dict[str, Any] = {
    "default_class": "batch",
    "log_requests": False,
    "classes": [
        {"name": "interactive", "rank": 0, "queue_deadline_s": 60.0},
        {"name": "batch", "rank": 1, "queue_deadline_s": 60.0, "preemptible": True},
    ],
    "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False},
}


def body(api: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "ignore_eos": True,
                           "temperature": 0, **extra}  # fmt: skip
    if api == "chat":
        out["messages"] = [{"role": "user", "content": chat_content_for(100)}]
    else:
        out["prompt"] = filler_text(97)
    return out


def path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


async def read_stream(resp: aiohttp.ClientResponse, chat: bool, on_piece: Any = None) -> dict:
    """The text and the usage chunk of an SSE answer; `on_piece(n)` after each piece."""
    text: list[str] = []
    usage = None
    roles = 0
    async for line in resp.content:
        if not line.startswith(b"data: {"):
            continue
        data = json.loads(line[6:])
        if data.get("usage"):
            usage = data["usage"]
        for c in data.get("choices") or []:
            delta = c.get("delta") or {}
            roles += "role" in delta
            piece = delta.get("content") if chat else c.get("text")
            if piece:
                text.append(piece)
                if on_piece is not None:
                    on_piece(len(text))
    return {"text": "".join(text), "usage": usage, "roles": roles}


async def preempted_run(base: str, direct: str, api: str) -> tuple[dict, dict, int]:
    """(the batch stream through the gateway, the same request alone, interactive status)."""
    chat = api == "chat"
    batch = body(api, 150, stream=True, stream_options={"include_usage": True})
    async with aiohttp.ClientSession() as s:
        async with s.post(direct + path(api), json=batch) as resp:
            alone = await read_stream(resp, chat)
        fired = asyncio.get_running_loop().create_future()
        inter_status: list[int] = []

        async def interactive() -> None:
            await fired
            headers = {"x-burstguard-class": "interactive"}
            async with s.post(base + path(api), json=body(api, 8), headers=headers) as r:
                await r.read()
                inter_status.append(r.status)

        def on_piece(n: int) -> None:
            if n == 30 and not fired.done():
                fired.set_result(None)

        task = asyncio.ensure_future(interactive())
        async with s.post(base + path(api), json=batch) as resp:
            assert resp.status == 200
            through = await read_stream(resp, chat, on_piece)
        await asyncio.wait_for(task, 30)
    return through, alone, inter_status[0]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_preempted_stream_resumes_with_the_same_text(tmp_path: Path, api: str) -> None:
    with start_emulator(tmp_path, "--max-num-seqs", "4", speedup=2.0) as emu:
        gw = start_gateway(tmp_path, emu.base_url, ONE_SLOT, resume=True)  # type: ignore[attr-defined]
        with gw:
            base = gw.base_url  # type: ignore[attr-defined]
            through, alone, status = asyncio.run(
                asyncio.wait_for(preempted_run(base, emu.base_url, api), 90)  # type: ignore[attr-defined]
            )
            m = samples(base)
    assert status == 200
    assert m.get('burstguard_preemptions_total{class="batch"}', 0) >= 1, m
    assert m.get("burstguard_reprefill_tokens_total", 0) > 100
    assert len(alone["text"]) == 150 * 4
    assert through["text"] == alone["text"]  # nothing duplicated, nothing missing
    assert through["usage"]["completion_tokens"] == 150  # what the client received
    assert through["roles"] == (1 if api == "chat" else 0)


def test_without_resume_the_gateway_does_not_preempt(tmp_path: Path) -> None:
    with start_emulator(tmp_path, "--max-num-seqs", "4", speedup=2.0) as emu:
        gw = start_gateway(tmp_path, emu.base_url, ONE_SLOT)  # type: ignore[attr-defined]
        with gw:
            base = gw.base_url  # type: ignore[attr-defined]
            through, alone, status = asyncio.run(
                asyncio.wait_for(preempted_run(base, emu.base_url, "completions"), 90)  # type: ignore[attr-defined]
            )
            m = samples(base)
    assert status == 200 and through["text"] == alone["text"]
    assert m.get('burstguard_preemptions_total{class="batch"}', 0) == 0
