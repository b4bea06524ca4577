"""The gateway's HTTP/1.1 client to its backend: pooled keep-alive connections, raw relay.
(`burstguard bench` and `calibrate` send with it too: it costs far less CPU per streamed
request than aiohttp: docs/bench.md, "The client's own limits".)

A generation answer is either read whole (JSON, errors) or relayed: each read from the
backend socket is parsed (httptools, C) and its body pieces handed to a sink callback in
the same call, with no reader queue and no task wake-up per chunk. That is what keeps the
gateway's cost per streamed token low (docs/gateway.md, "Overhead benchmark"). A relay can also be
armed before the answer's head arrives (`Call.on_head`): then the first token is written
to the client in the same loop pass that read it, with no task wake-up on the way.

Idle connections are reused newest first and never after UPSTREAM_IDLE_S: an engine's
uvicorn closes idle keep-alive connections after 5 s, and a request written on a connection
the other end is closing is lost. Closing an in-flight connection (`Call.abort`) is how the
engine learns that the client went away: vLLM and the emulator then abort the request and
free its KV blocks.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

UPSTREAM_IDLE_S = 4.0


class UpstreamError(Exception):
    """Talking to the backend failed."""


class Unreachable(UpstreamError):
    """The backend refused or could not be reached."""


class UpstreamTimeout(UpstreamError):
    """The backend stayed silent longer than its read (or connect) timeout."""


class Broken(UpstreamError):
    """The backend closed the connection or sent malformed HTTP before the answer ended."""


Sink = Callable[[bytes], None]


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the backend; runs one call at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.call: Call | None = None
        self.idle_since = 0.0
        self.closed = False
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.paused = False  # the client is not keeping up: its silence is not the backend's
        self._framed = False  # the answer has a content-length or is chunked

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._timer is not None:
            self._timer.cancel()
        call = self.call
        if call is None or call.ended:
            return
        if exc is None and call.status >= 200 and not self._framed:
            self.call = None  # an answer delimited by the connection's close (HTTP/1.1 allows
            call.flush()  # it: no content-length, not chunked) ends at EOF
            call.complete()
        else:
            call.fail(Broken("backend closed the connection" + (f": {exc}" if exc else "")))

    def start(self, call: Call, request: bytes) -> None:
        self.call = call
        self._framed = self.paused = False
        assert self.transport is not None
        self.transport.write(request)
        self._last_read = call.sent_at = time.monotonic()
        self._arm(self._pool.read_timeout_s)

    def _arm(self, delay_s: float) -> None:
        self._timer = self._pool.loop.call_later(delay_s, self._check_silence)

    def _check_silence(self) -> None:
        """Fails the call when the backend has been silent for the whole read timeout."""
        self._timer = None
        if self.call is None or self.call.ended:
            return
        if self.paused:  # we stopped reading: the backend is waiting for us, not silent
            self._arm(self._pool.read_timeout_s)
            return
        silent = time.monotonic() - self._last_read
        if silent >= self._pool.read_timeout_s:
            self.call.fail(UpstreamTimeout(f"no data from the backend for {silent:.1f} s"))
            self.abort()
        else:
            self._arm(self._pool.read_timeout_s - silent)

    def data_received(self, data: bytes) -> None:
        call = self.call
        if call is None:  # nothing was asked: a backend talking out of turn
            self.abort()
            return
        self._last_read = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            call.fail(Broken(f"malformed HTTP from the backend: {exc}"))
            self.abort()
            return
        call.flush()

    def eof_received(self) -> bool:
        return False

    # parser callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type" and self.call is not None:
            self.call.content_type = value.decode("latin-1")
        elif name == b"content-length" or name == b"transfer-encoding":
            self._framed = True
        elif name == b"retry-after" and self.call is not None:
            self.call.retry_after = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self.call is not None:
            self.call.headers_done(self._parser.get_status_code(), self._last_read)

    def on_body(self, body: bytes) -> None:
        if self.call is not None:
            self.call.pieces.append(body)

    def on_message_complete(self) -> None:
        call = self.call
        if call is None:
            return
        keep = bool(self._parser.should_keep_alive())
        call.flush()
        self.call = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        call.complete()
        if keep and not self.closed:
            self._pool.release(self)
        else:
            self.abort()

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()


class Call:
    """One request to the backend: its status, then its body, whole or through a sink.

    `sent_at` (request written) and `head_at` (the read that brought the answer's head) are
    time.monotonic() stamps, for the gateway's own share of the first-token path.
    """

    __slots__ = (
        "_conn",
        "_done",
        "_head",
        "_sink",
        "content_type",
        "ended",
        "head_at",
        "on_head",
        "pieces",
        "retry_after",
        "sent_at",
        "status",
    )  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0
        self.content_type = ""
        self.retry_after: str | None = None
        self.pieces: list[bytes] = []
        self.ended = False
        self._sink: Sink | None = None
        self._head: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._conn: _Connection | None = None
        self.sent_at = self.head_at = 0.0
        self.on_head: Callable[[int], None] | None = None
        """Runs with the status as soon as the head is parsed, before any body is handed
        on: a relay installs its sink here (`stream_to`) to get the first body bytes in the
        same read."""

    async def response(self) -> int:
        """Waits for the answer's status line and headers; returns the status."""
        await self._head
        return self.status

    async def read(self) -> bytes:
        """The whole body (after `response`)."""
        await self._done
        body = b"".join(self.pieces)
        self.pieces = []
        return body

    def stream_to(self, sink: Sink) -> None:
        """Hands each read's body bytes to `sink` from now on, as they arrive."""
        self._sink = sink
        self.flush()

    async def finished(self) -> None:
        """Returns when the whole answer has been read (and handed on)."""
        await self._done

    def pause(self, paused: bool) -> None:
        """Stops (or restarts) reading from the backend: the client is not keeping up."""
        conn = self._conn
        if conn is not None and conn.transport is not None and not conn.closed:
            conn.paused = paused
            if paused:
                conn.transport.pause_reading()
            else:
                conn._last_read = time.monotonic()  # the backend's silence counts from here
                conn.transport.resume_reading()

    def abort(self) -> None:
        """Drops the connection (the engine aborts the request and frees its KV)."""
        if self._conn is not None and not self.ended:
            self.ended = True
            self._conn.call = None
            self._conn.abort()
            for fut in (self._head, self._done):
                fut.cancel()

    # called by the connection
    def headers_done(self, status: int, read_at: float) -> None:
        self.status = status
        self.head_at = read_at
        if self.on_head is not None:
            self.on_head(status)
        if not self._head.done():
            self._head.set_result(None)

    def flush(self) -> None:
        if self._sink is not None and self.pieces:
            data = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
            self.pieces = []
            self._sink(data)

    def complete(self) -> None:
        self.ended = True
        if not self._head.done():
            self._head.set_result(None)
        if not self._done.done():
            self._done.set_result(None)

    def fail(self, error: UpstreamError) -> None:
        if self.ended:
            return
        self.ended = True
        for fut in (self._head, self._done):
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: whoever awaits still gets it; nobody must


class UpstreamPool:
    """Keep-alive connections to one backend base URL."""

    def __init__(self, base_url: str, connect_timeout_s: float, read_timeout_s: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        default = (parts.scheme == "https" and self.port == 443) or self.port == 80
        self.host_header = self.host if default else f"{self.host}:{self.port}"
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self.loop = asyncio.get_running_loop()

    async def start(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Call:
        """Sends a request on an idle or new connection; the returned Call awaits its answer."""
        conn = self._reuse() or await self._connect()
        lines = [f"{method} {self.prefix}{path} HTTP/1.1\r\nhost: {self.host_header}\r\n"
                 f"content-length: {len(body)}\r\n"]  # fmt: skip
        lines += [f"{k}: {v}\r\n" for k, v in headers.items()]
        lines.append("\r\n")
        call = Call(self.loop)
        call._conn = conn
        conn.start(call, "".join(lines).encode("latin-1") + body)
        return call

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < UPSTREAM_IDLE_S:
                return conn
            conn.abort()
        return None

    async def _connect(self) -> _Connection:
        try:
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: _Connection(self), self.host, self.port, ssl=self._ssl
                ),
                self.connect_timeout_s,
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"connecting to {self.host_header} took over {self.connect_timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self.host_header}: {exc}") from exc
        self._all.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    def close(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()
