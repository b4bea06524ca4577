"""bench's SSE reader on the stream shapes real servers send: vLLM's `\\n\\n` events,
sse-starlette's `\\r\\n` (llama-cpp-python), a clean end, a cut, and a stream a server ended
early with `[DONE]` but no finish_reason (llama-cpp-python's interrupt_requests)."""

from __future__ import annotations

import pytest
from aiohttp import web
from tests.conftest import serve_app

from burstguard.bench.stream import Attempt, new_client, send


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
    async with serve_app(app) as base:
        client = new_client(base, 10.0)
        try:
            return await send(client, "/v1/chat/completions", b"{}", {}, stream=True, timeout_s=10)
        finally:
            client.close()


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


async def test_an_error_event_is_a_broken_stream_with_its_code_and_tokens() -> None:
    """A server that ends a stream with an OpenAI error event (the picker's preemption,
    the gateway's in-band errors): broken, its `code` kept, the tokens received counted."""
    err = '{"error": {"message": "m", "type": "service_unavailable", "code": "preempted"}}'
    a = await fetch(stream(3, None, done=False) + f"data: {err}\n\n")
    assert a.error == "stream_broken" and a.error_code == "preempted"
    assert a.completion_tokens == 3


def test_events_split_across_reads_and_usage_are_read() -> None:
    """Events cut mid-line between reads, \\r\\n separators, several tokens in one read
    (gap 0), the usage event and [DONE]."""
    import time

    from burstguard.bench.stream import SseReader

    body = stream(4, "length", done=True, sep="\r\n\r\n").encode()
    body = body.replace(b"data: [DONE]", b'data: {"choices":[],"usage":{"prompt_tokens":'
                        b'7,"completion_tokens":4}}\r\n\r\ndata: [DONE]')  # fmt: skip
    attempt = Attempt(started=time.monotonic())
    reader = SseReader(attempt)
    for i in range(0, len(body), 37):
        reader.feed(body[i : i + 37])
    reader.close()
    assert attempt.ok, attempt.detail
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (7, 4)
    assert len(attempt.itl_s) == 3 and attempt.ttft_s is not None

    whole = Attempt(started=time.monotonic())
    one = SseReader(whole)
    one.feed(body)  # every token in one read: the first timed, the rest 0 apart
    one.close()
    assert whole.ok and whole.itl_s == [0.0, 0.0, 0.0]


async def test_http_errors_and_refusals_are_classified() -> None:
    """A 429's Retry-After is read; a closed port is connection_refused, not a raise."""
    from burstguard.procs import free_port

    async def busy(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "busy"}}, status=429,
                                 headers={"Retry-After": "2"})  # fmt: skip

    app = web.Application()
    app.router.add_post("/v1/completions", busy)
    async with serve_app(app) as base:
        client = new_client(base, 5.0)
        a = await send(client, "/v1/completions", b"{}", {}, stream=True, timeout_s=5)
        client.close()
    assert (a.error, a.status, a.retry_after_s) == ("http_429", 429, 2.0)
    assert a.detail is not None and "busy" in a.detail
    client = new_client(f"http://127.0.0.1:{free_port()}", 5.0)
    a = await send(client, "/v1/completions", b"{}", {}, stream=True, timeout_s=5)
    assert a.error == "connection_refused", a.detail
