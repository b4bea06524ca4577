"""The gateway's HTTP/1.1 server: asyncio protocols over httptools, no ASGI layers.

Why not uvicorn + Starlette: a proxied token costs one read from the engine and one write
to the client, and under a burst the gateway relays tens of thousands of them a second.
Through ASGI each one crossed a stream reader, a task wake-up and four `send` wrappers
(~40 us of gateway CPU per chunk, docs/gateway.md "Overhead benchmark"); here the upstream
protocol's callback writes the chunk to the client transport directly. The server keeps
what a proxy needs and nothing more: keep-alive (and pipelined requests, answered in
order), body size limits decided from the headers, `Expect: 100-continue`, a handler task
per request that is cancelled when its client hangs up, write flow control exposed to the
handler, idle timeouts and a graceful stop.

Streams are written chunk by chunk, but no more often than once per flush interval each
(`Responder.write_soon`): a chunk that comes sooner after the stream's last write is held
and goes out with the others at the next tick of one timer shared by all streams. A
stream slower than the interval (a real engine's inter-token latency is 10-50 ms) is
never held; a faster one (the instant emulator, a small model on a big GPU) gets fewer,
larger writes, at most one interval late, and never its first token. A loopback write
costs more than the Python around it (it runs the receiver's TCP path too), so under load
this is what cuts the writes per stream (vLLM's `--stream-interval` makes the same trade
inside the engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

import httptools

log = logging.getLogger("burstguard.gateway")

MAX_HEAD_BYTES = 64 * 1024
MAX_PIPELINED = 16
_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 413: "Payload Too Large", 429: "Too Many Requests",
    431: "Request Header Fields Too Large", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}  # fmt: skip

Header = tuple[str, str]


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; a repeated header keeps its first."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    oversize: bool = False  # the body exceeds the server's limit (answer 413)
    keep_alive: bool = True
    error: tuple[int, str] | None = None  # not parsable: the status and message to answer
    http11: bool = True
    received: float = 0.0  # time.monotonic() when its last byte was parsed
    _chunks: list[bytes] = field(default_factory=list)
    _size: int = 0


class Responder:
    """Writes one request's answer: whole (`send`) or as a chunked stream.

    Writes after the client has gone are dropped. `paused` is True while the client's
    socket buffer is full; `on_writable` (if set) runs when it drains, so a relay can stop
    reading its upstream meanwhile (backpressure end to end).
    """

    __slots__ = (
        "_chunked",
        "_conn",
        "_held",
        "_keep_alive",
        "_last_write",
        "_pending",
        "finished",
        "on_writable",
        "started",
    )

    def __init__(self, conn: HttpConnection, keep_alive: bool, chunked: bool = True) -> None:
        self._conn = conn
        self._keep_alive = keep_alive
        self._chunked = chunked  # False for an HTTP/1.0 client: the stream ends at close
        self.started = False
        self.finished = False
        self.on_writable: Callable[[], None] | None = None
        self._pending: list[bytes] = []
        self._last_write = -math.inf
        self._held = b""  # a stream's head, written with its first chunk

    @property
    def gone(self) -> bool:
        return self._conn.closed

    @property
    def paused(self) -> bool:
        return self._conn.write_paused

    def _head(self, status: int, headers: Iterable[Header], extra: str) -> bytes:
        self.started = True
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in headers]
        if not self._keep_alive:
            lines.append("connection: close\r\n")
        lines.append(extra)
        return "".join(lines).encode("latin-1")

    def send(self, status: int, body: bytes, headers: Iterable[Header] = ()) -> None:
        """The whole answer at once, with its content-length."""
        if self.started:
            raise RuntimeError("response already started")
        head = self._head(status, headers, f"content-length: {len(body)}\r\n\r\n")
        self._conn.write(head + body)
        self._finish()

    def start_stream(self, status: int, headers: Iterable[Header] = ()) -> None:
        """Starts a chunked answer; `write_soon` its pieces, then `end`.

        The head goes out with the first piece: one write (a syscall) fewer per stream.
        """
        if self.started:
            raise RuntimeError("response already started")
        if not self._chunked:
            self._keep_alive = False  # the body ends where the connection does
        framing = "transfer-encoding: chunked\r\n\r\n" if self._chunked else "\r\n"
        self._held = self._head(status, headers, framing)

    def _chunk(self, data: bytes, last: bool = False) -> bytes:
        if not self._chunked:
            return data
        if not data:
            return b"0\r\n\r\n" if last else b""
        return b"%x\r\n%b\r\n%b" % (len(data), data, b"0\r\n\r\n" if last else b"")

    def _out(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        self._conn.write(data)

    def write_soon(self, data: bytes) -> None:
        """One chunk of a started stream: written now if this stream's last write is at least
        one flush interval old, else held and written with the others at the next tick."""
        if not data or self.finished:
            return
        if not self._pending:
            flusher = self._conn.flusher
            now = flusher.now()
            if now - self._last_write >= flusher.interval_s:
                self._last_write = now
                self._out(self._chunk(data))
                return
            flusher.add(self)
        self._pending.append(data)

    def flush(self) -> None:
        """Writes what `write_soon` holds as one chunk."""
        if self._pending and not self.finished:
            data = b"".join(self._pending)
            self._pending.clear()
            self._last_write = self._conn.flusher.now()
            self._out(self._chunk(data))

    def end(self, last: bytes = b"") -> None:
        """Ends a started stream: held pieces, `last` and the terminator in one write."""
        if self.finished:
            return
        if last:
            self._pending.append(last)
        data = b"".join(self._pending)
        self._pending.clear()
        self._out(self._chunk(data, last=True))
        self._finish()

    def _finish(self) -> None:
        self.finished = True
        self._conn.response_done(self._keep_alive)


class Flusher:
    """Writes the held chunks of every coalesced stream at the next tick, from one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float) -> None:
        self.now = loop.time
        self._loop = loop
        self.interval_s = interval_s
        self._dirty: list[Responder] = []

    def add(self, resp: Responder) -> None:
        if not self._dirty:
            self._loop.call_later(self.interval_s, self._flush)
        self._dirty.append(resp)

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, []
        for resp in dirty:
            resp.flush()


Handler = Callable[[HttpRequest, Responder], Awaitable[None]]
ErrorWriter = Callable[[Responder, int, str, str], None]


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests and runs their handlers one at a time."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = server.loop
        self.flusher = server.flusher
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._req: HttpRequest | None = None  # being parsed
        self._url = b""
        self._head_bytes = 0
        self._ready: deque[HttpRequest] = deque()  # parsed, waiting to be handled
        self._task: asyncio.Task[None] | None = None
        self._responder: Responder | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._broken = False  # stop parsing (bad request, oversize): close after answering
        self.closed = False
        self.write_paused = False

    # -- transport events -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        resp = self._responder
        if resp is not None and not resp.finished:
            if self._task is not None and not self._task.done():
                self._task.cancel()  # the handler notices its client is gone (resp.gone)
            if resp.on_writable is not None:
                resp.on_writable()

    def eof_received(self) -> bool:
        return False  # a half-closed client is a gone client: close (as uvicorn does)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._responder is not None and self._responder.on_writable is not None:
            self._responder.on_writable()

    def data_received(self, data: bytes) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._broken:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._bad(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            if not self._broken:
                self._bad(400, f"malformed HTTP request: {exc}")
        self._next()
        if not self.busy:  # part of a request: it too must come within the idle timeout
            self._arm_idle()

    # -- parser callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._head_bytes = 0
        self._req = HttpRequest("", "", {})

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        assert self._req is not None
        self._req.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            self._bad(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
            raise httptools.HttpParserError("head too large")

    def on_headers_complete(self) -> None:
        req = self._req
        assert req is not None
        req.method = self._parser.get_method().decode("latin-1")
        req.path = httptools.parse_url(self._url).path.decode("latin-1") if self._url else "/"
        req.keep_alive = bool(self._parser.should_keep_alive())
        req.http11 = self._parser.get_http_version() != "1.0"
        limit = self._server.max_body_bytes
        declared = req.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            req.oversize = True
        elif req.headers.get("expect", "").lower() == "100-continue" and self._transport:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if req.oversize:  # answer now; the body that follows is not read
            self._deliver(req, broken=True)

    def on_body(self, body: bytes) -> None:
        req = self._req
        if req is None or req.oversize:
            return
        req._size += len(body)
        if req._size > self._server.max_body_bytes:
            req.oversize = True
            self._deliver(req, broken=True)
            raise httptools.HttpParserError("body too large")
        req._chunks.append(body)

    def on_message_complete(self) -> None:
        req = self._req
        if req is None or req.oversize:
            return
        req.body = b"".join(req._chunks)
        req._chunks = []
        req.received = time.monotonic()
        self._deliver(req, broken=False)

    def _deliver(self, req: HttpRequest, broken: bool) -> None:
        self._req = None
        if broken:
            req.keep_alive = False
            self._broken = True
        if len(self._ready) >= MAX_PIPELINED:
            self._bad(400, f"more than {MAX_PIPELINED} pipelined requests")
            return
        self._ready.append(req)

    def _bad(self, status: int, message: str) -> None:
        """A request that cannot be parsed: answered (after those before it), then closed."""
        self._broken = True
        self._ready.append(HttpRequest("", "", {}, keep_alive=False, error=(status, message)))

    # -- running handlers -----------------------------------------------------------

    def _next(self) -> None:
        """Starts the handler of the oldest parsed request, if none is running."""
        if self._task is not None or not self._ready or self.closed:
            return
        req = self._ready.popleft()
        self._responder = Responder(self, req.keep_alive, req.http11)
        self._task = self._loop.create_task(self._run(req, self._responder))

    async def _run(self, req: HttpRequest, resp: Responder) -> None:
        server = self._server
        try:
            if req.error is not None:
                server.write_error(resp, *req.error, "bad_request")
            elif req.oversize:
                limit = server.max_body_bytes
                server.write_error(resp, 413, f"request body larger than {limit} bytes",
                                   "request_too_large")  # fmt: skip
            else:
                await server.handler(req, resp)
        except asyncio.CancelledError:
            if not self.closed:
                raise
        except Exception:
            log.exception("request %s %s failed in the gateway", req.method, req.path)
            if not resp.started:
                server.write_error(resp, 500, "internal gateway error", "internal_error")
        finally:
            self._task = None
            self._responder = None
            if not resp.finished:  # a handler that ended without answering: nothing to reuse
                self.close()
            elif not self.closed:
                if self._ready:
                    self._next()
                else:
                    self._arm_idle()

    def response_done(self, keep_alive: bool) -> None:
        """The answer is written; a connection that is not kept alive closes now."""
        if not keep_alive:
            self.close()

    # -- writing, closing -----------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if not self.closed:
            self._idle = self._loop.call_later(self._server.keep_alive_s, self.close)

    @property
    def busy(self) -> bool:
        return self._task is not None or bool(self._ready)


class HttpServer:
    """Listens, owns the connections, and stops gracefully on SIGINT/SIGTERM."""

    def __init__(
        self, handler: Handler, write_error: ErrorWriter, *, max_body_bytes: int,
        keep_alive_s: float, flush_interval_s: float = 0.0,
    ) -> None:  # fmt: skip
        self.handler = handler
        self.write_error = write_error
        self.max_body_bytes = max_body_bytes
        self.keep_alive_s = keep_alive_s
        self.connections: set[HttpConnection] = set()
        self.loop: asyncio.AbstractEventLoop
        self.flusher: Flusher
        self._flush_interval_s = flush_interval_s

    async def serve(
        self, host: str, port: int, on_ready: Callable[[], None] = lambda: None,
        drain_s: float = 10.0,
    ) -> None:  # fmt: skip
        """Serves until SIGINT or SIGTERM; then stops accepting and waits for open answers."""
        self.loop = asyncio.get_running_loop()
        self.flusher = Flusher(self.loop, self._flush_interval_s)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, stop.set)
        server = await self.loop.create_server(
            lambda: HttpConnection(self), host, port, backlog=2048, reuse_address=True
        )
        on_ready()
        try:
            await stop.wait()
        finally:
            server.close()
            deadline = self.loop.time() + drain_s
            for conn in list(self.connections):
                if not conn.busy:
                    conn.close()
            while any(c.busy for c in self.connections) and self.loop.time() < deadline:
                await asyncio.sleep(0.05)
            for conn in list(self.connections):
                conn.close()
