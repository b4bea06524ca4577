"""A stream whose head is held (its backend answered 200, then failed before a token, so
not a byte went out) can still be answered with a status: the gateway's 429 for a request
queued again after such a failure went out as a cut connection (`send` raised)."""

from __future__ import annotations

import aiohttp

from burstguard.core.gateway.config import LimitsConfig
from burstguard.http.server import HttpRequest, HttpServer, Responder


async def test_a_held_stream_head_gives_way_to_a_whole_answer() -> None:
    async def handler(req: HttpRequest, resp: Responder) -> None:
        resp.start_stream(200, [("content-type", "text/event-stream")])
        if req.path == "/held":
            resp.send(429, b'{"error": "later"}', [("retry-after", "1")])
        else:  # once a byte of the stream is out, only the stream can go on
            resp.write_soon(b"data: x\n\n", hold=False)
            try:
                resp.send(429, b"{}")
            except RuntimeError:
                resp.end(b"data: [DONE]\n\n")

    server = HttpServer(handler, lambda *a: None, max_body_bytes=1 << 20,
                        limits=LimitsConfig())  # fmt: skip
    listener = await server.listen("127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/held") as r:
                assert (r.status, r.headers["retry-after"]) == (429, "1")
                assert await r.read() == b'{"error": "later"}'
            async with session.get(f"http://127.0.0.1:{port}/written") as r:
                assert r.status == 200 and await r.read() == b"data: x\n\ndata: [DONE]\n\n"
    finally:
        server.close(listener)
