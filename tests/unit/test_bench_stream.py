"""bench's SSE reader on the stream shapes real servers send: vLLM's `\\n\\n` events,
sse-starlette's `\\r\\n` (llama-cpp-python), a clean end, a cut, and a stream a server ended
early with `[DONE]` but no finish_reason (llama-cpp-python's interrupt_requests)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from tests.conftest import serve_app

from burstguard.bench.stream import Attempt, send


def chunk(content: str | None, finish: str | None = None, sep: str = "\n\n") -> str:
    delta = "{}" if content is None else f'{{"content": "{content}"}}'
    fin = "null" if finish is None else f'"{finish}"'
    return f'data: {{"choices": [{{"index": 0, "delta": {delta}, "finish_reason": {fin}}}]}}{sep}'


def stream(n: int, finish: str | None, done: bool, sep: str = "\n\n") -> str:
    body = chunk(None, sep=sep) + "".join(chunk(f"t{i}", sep=sep) for i in range(n))
    if finish is not None:
        body += chunk(None, finish, sep)
    return body + (f"data: [DONE]{sep}" if done else "")


async def fetch(body: str) -> Attempt:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for line in body.splitlines(keepends=True):  # one write per line: split events
            await resp.write(line.encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with serve_app(app) as base, aiohttp.ClientSession() as session:
        return await send(
            session, base + "/v1/chat/completions", b"{}", {}, stream=True, timeout_s=10
        )


@pytest.mark.parametrize("sep", ["\n\n", "\r\n\r\n"])
async def test_a_whole_stream_counts_its_tokens(sep: str) -> None:
    a = await fetch(stream(5, "length", done=True, sep=sep))
    assert a.ok, a.detail
    assert a.completion_tokens == 5 and len(a.itl_s) == 4 and a.ttft_s is not None


async def test_done_without_a_finish_reason_is_a_cut_stream() -> None:
    a = await fetch(stream(2, None, done=True, sep="\r\n\r\n"))
    assert a.error == "stream_broken" and a.detail is not None
    assert "finish_reason" in a.detail
    assert a.completion_tokens == 2


async def test_no_done_is_a_broken_stream() -> None:
    a = await fetch(stream(3, "stop", done=False))
    assert a.error == "stream_broken" and a.detail is not None and "[DONE]" in a.detail
