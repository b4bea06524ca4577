"""The gateway's own HTTP layers, on the wire: keep-alive and pipelining, Expect, bad HTTP,
size limits, stream coalescing, what a client sees when the backend fails, graceful stop."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.conftest import raw_backend, start_emulator
from tests.integration.test_gateway import start_gateway

from burstguard.procs import free_port
from burstguard.scrape import metric_sum, parse_metrics

MODEL = "llama3-8b-h100"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway (4 KiB body limit) in front of the emulator at 20x; yields its address."""
    tmp = tmp_path_factory.mktemp("gwhttp")
    with start_emulator(tmp, speedup=20.0) as emu:
        gw = start_gateway(tmp, emu.base_url, {"max_body_bytes": 4096})  # type: ignore[attr-defined]
        with gw:
            yield gw.base_url  # type: ignore[attr-defined]


def raw(base: str, data: bytes, until: bytes | None = None, timeout_s: float = 5.0) -> bytes:
    """Sends raw bytes on a fresh connection; reads until `until` appears or the peer closes."""
    host, port = base.removeprefix("http://").split(":")
    out = b""
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(data)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (until is None or until not in out):
            try:
                got = s.recv(65536)
            except TimeoutError:
                break
            if not got:
                break
            out += got
    return out


def body_of(response: bytes) -> dict:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


def test_pipelined_requests_are_answered_in_order(gateway: str) -> None:
    reqs = (b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")  # fmt: skip
    out = raw(gateway, reqs)
    heads = re.findall(rb"HTTP/1\.1 (\d{3}) ", out)
    assert heads == [b"200", b"404", b"200"]
    assert out.endswith(b'{"status":"ok"}')  # the connection closed after the last one


def test_expect_100_continue_then_the_answer(gateway: str) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"expect: 100-continue\r\ncontent-length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    host, port = gateway.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(head)
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        out = b""
        while b'"usage"' not in out:
            got = s.recv(65536)
            assert got, out
            out += got
    assert out.startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "bad_request"),
        (b"GET /health HTTP/1.1\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", 431, "bad_request"),
        (b"POST /health HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n", 405,
         "method_not_allowed"),
        (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 999999\r\n\r\n", 413,
         "request_too_large"),
        (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
         + b"1000\r\n" + b"a" * 4096 + b"\r\n" + b"1000\r\n" + b"a" * 4096 + b"\r\n0\r\n\r\n",
         413, "request_too_large"),
    ],
)  # fmt: skip
def test_bad_http_gets_an_openai_error(
    gateway: str, request_bytes: bytes, status: int, code: str
) -> None:
    out = raw(gateway, request_bytes, until=b"}}")
    assert out.split(b"\r\n", 1)[0].startswith(f"HTTP/1.1 {status} ".encode()), out[:200]
    err = body_of(out)["error"]
    assert err["code"] == code and err["message"]


def test_a_small_chunked_body_is_read_and_served(gateway: str) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
           + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))  # fmt: skip
    out = raw(gateway, req)
    assert out.startswith(b"HTTP/1.1 200 OK")
    assert body_of(out)["usage"]["completion_tokens"] == 2


def test_an_http10_client_gets_a_stream_that_ends_at_close(gateway: str) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True}).encode()
    out = raw(gateway, b"POST /v1/completions HTTP/1.0\r\ncontent-length: %d\r\n\r\n%b"
              % (len(body), body))  # fmt: skip
    head, text = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK") and b"chunked" not in head
    assert b"connection: close" in head
    assert text.startswith(b"data: {") and text.rstrip().endswith(b"data: [DONE]")


def _stream_frames(base: str, tokens: int) -> tuple[int, int, float, float]:
    """Streams one completion on a raw socket: (HTTP chunks, data events, TTFT s, duration s)."""
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": tokens,
                       "ignore_eos": True, "stream": True}).encode()  # fmt: skip
    head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
    host, port = base.removeprefix("http://").split(":")
    out, first, last = b"", 0.0, 0.0
    with socket.create_connection((host, int(port)), timeout=10) as s:
        sent = time.monotonic()
        s.sendall(head + b"content-length: %d\r\n\r\n%b" % (len(body), body))
        while got := s.recv(65536):
            last = time.monotonic()
            first = first or last
            out += got
    assert out.startswith(b"HTTP/1.1 200 OK")
    rest = out.split(b"\r\n\r\n", 1)[1]
    frames, text = 0, b""
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        frames += 1
        text += rest[:size]
        rest = rest[size + 2 :]
    return frames, text.count(b"data:"), first - sent, last - first


def test_fast_streams_are_coalesced_slow_ones_and_first_tokens_are_not(tmp_path: Path) -> None:
    # The emulator at 1x (llama3-8b-h100): one token every ~10 ms for a single stream.
    with start_emulator(tmp_path, speedup=1.0) as emu:
        gws = [start_gateway(tmp_path, emu.base_url, {"stream_flush_ms": ms})  # type: ignore[attr-defined]
               for ms in (0, 2, 60)]  # fmt: skip
        with gws[0], gws[1], gws[2]:
            every, short, coalesced = (_stream_frames(g.base_url, 48) for g in gws)  # type: ignore[attr-defined]
    assert every[1] == short[1] == coalesced[1] >= 49  # all tokens (and [DONE]) arrive
    assert every[0] >= 30, "without holding, about one HTTP chunk per token"
    assert short[0] >= 30, "a stream slower than the flush interval is not held"
    frames, _, ttft, took = coalesced
    assert frames <= took / 0.060 + 3 < every[0] / 2
    assert ttft < every[2] + 0.040, "the first token is written at once, not held"


@pytest.fixture
async def chat_backend() -> AsyncIterator[str]:
    """A backend streaming chat as vLLM does: the role chunk, 20 ms later (in a read of
    its own) the first token, 0.5 s later the end; any GET gets an empty 200."""
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    token = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)  # fmt: skip
        await reader.readexactly(length)
        if head.startswith(b"GET"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")  # fmt: skip
            for event, pause_s in ((role, 0.02), (token, 0.5), (end, 0.0)):
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(pause_s)
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with raw_backend(handle) as url:
        yield url


async def test_the_first_token_is_not_held_behind_a_chat_role_chunk(
    chat_backend: str, tmp_path: Path
) -> None:
    """With a long flush interval (0.4 s), the role chunk goes out at once and so must the
    token 20 ms after it: holding it for the interval would add that to every chat TTFT
    (before the fix: 0.4 s here, 10 ms wall at the default interval)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
    with start_gateway(tmp_path, chat_backend, {"stream_flush_ms": 400}) as gw:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                sent = time.monotonic()
                async with session.post(gw.base_url + "/v1/chat/completions", json=body) as r:  # type: ignore[attr-defined]
                    assert r.status == 200
                    async for line in r.content:
                        if b'"content":"hi"' in line:
                            first_token_s = time.monotonic() - sent
                            break
                    await r.read()
                assert first_token_s < 0.2, f"the first token took {first_token_s:.3f} s"


@pytest.fixture
async def cutting_backend() -> AsyncIterator[str]:
    """A backend that streams two SSE events, then drops the connection mid-answer."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))  # fmt: skip
        await reader.readexactly(length)
        event = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
        for _ in range(2):
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.transport.abort()

    async with raw_backend(handle) as url:
        yield url


async def test_a_backend_that_breaks_mid_stream_ends_it_with_an_error(
    cutting_backend: str, tmp_path: Path
) -> None:
    gw = start_gateway(tmp_path, cutting_backend, {})
    await asyncio.to_thread(gw.__enter__)
    try:
        base = gw.base_url  # type: ignore[attr-defined]
        body = {"model": "m", "prompt": "hi", "max_tokens": 4, "stream": True}
        async with aiohttp.ClientSession() as session:
            async with session.post(base + "/v1/completions", json=body) as r:
                assert r.status == 200
                text = await r.read()  # the chunked body is properly terminated
            async with session.get(base + "/metrics") as m:
                counted = parse_metrics(await m.text())
    finally:
        await asyncio.to_thread(gw.stop)
    events = [e for e in text.split(b"\n\n") if e.startswith(b"data:")]
    assert len(events) == 3
    err = json.loads(events[-1].removeprefix(b"data: "))["error"]
    assert err["type"] == "upstream_error" and err["code"] == "backend_error"
    assert counted['llm_request_total{class="standard",outcome="failed"}'] == 1
    assert metric_sum(counted, "burstguard_upstream_errors_total") == 1


def test_an_unreachable_backend_gets_503(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with start_gateway(tmp_path, dead, {}) as gw:  # type: ignore[attr-defined]
        req = b'{"model": "m", "prompt": "hi", "max_tokens": 2}'
        head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
        out = raw(gw.base_url, head + b"content-length: %d\r\n\r\n%b" % (len(req), req))  # type: ignore[attr-defined]
    assert out.startswith(b"HTTP/1.1 503 ")
    assert body_of(out)["error"]["code"] == "backend_unreachable"


def test_sigterm_lets_open_streams_finish_and_refuses_new_connections(tmp_path: Path) -> None:
    """A rolling update or a scale-down (SIGTERM) loses no answer already being streamed:
    the gateway stops accepting at once, lets open streams end, then exits 0."""
    tokens = 150  # ~1.5 s at 1x: the signal lands mid-stream
    with start_emulator(tmp_path, speedup=1.0) as emu:
        gw = start_gateway(tmp_path, emu.base_url, {})  # type: ignore[attr-defined]
        with gw:
            assert gw.proc is not None
            host, port = gw.base_url.removeprefix("http://").split(":")  # type: ignore[attr-defined]
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": tokens,
                               "stream": True, "ignore_eos": True})  # fmt: skip
            conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            first = resp.readline()
            assert first.startswith(b"data:")
            gw.proc.send_signal(signal.SIGTERM)
            rest = resp.read()  # the stream goes on to its end
            conn.close()
            with pytest.raises(ConnectionRefusedError):  # no longer listening
                socket.create_connection((host, int(port)), timeout=2).close()
            assert gw.proc.wait(timeout=15) == 0
    events = [e for e in (first + rest).split(b"\n\n") if e.startswith(b"data:")]
    assert events[-1] == b"data: [DONE]"
    choices = [json.loads(e.removeprefix(b"data: "))["choices"][0] for e in events[:-1]]
    assert sum(1 for c in choices if c["text"]) == tokens
    assert choices[-1]["finish_reason"] == "length"
