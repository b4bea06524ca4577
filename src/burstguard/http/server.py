"""The gateway's HTTP/1.1 server: asyncio protocols over httptools, no ASGI layers.

Why not uvicorn + Starlette: a proxied token costs one read from the engine and one write
to the client, and under a burst the gateway relays tens of thousands of them a second.
Through ASGI each one crossed a stream reader, a task wake-up and four `send` wrappers
(what that cost, from py-spy profiles: docs/measurements/2026-12-05-gateway-overhead.md);
here the upstream
protocol's callback writes the chunk to the client transport directly. The server keeps
what a proxy needs and nothing more: keep-alive (and pipelined requests, answered in
order), body size limits decided from the headers, `Expect: 100-continue` (sent when the
request's turn comes and its head passes the gateway's checks), a handler task per request
that is cancelled when its client hangs up, flow control both ways (reading pauses while
the client's answers back up; writing tells the handler), the limits and timeouts a server
facing unknown clients needs (`LimitsConfig`), a lingering close after an error and a
graceful stop.

Streams are written chunk by chunk, but no more often than once per flush interval each
(`Responder.write_soon`): a chunk that comes sooner after the stream's last write is held
and goes out with the others at the next tick of one timer shared by all streams. A
stream slower than the interval (a real engine's inter-token latency is 10-50 ms) is
never held; a faster one (the instant emulator, a small model on a big GPU) gets fewer,
larger writes, at most one interval late, and never its first token: nothing is held
until a chunk with content has gone out (a chat stream's first event, the role, comes
just before the first token in a read of its own; holding the token behind it added up
to one interval to every TTFT). A loopback write
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
from typing import NoReturn, Protocol, cast

import httptools


class ServerLimits(Protocol):
    """What the server reads of its limits (the gateway's `LimitsConfig` is one): kept as a
    protocol so that this module imports nothing of the gateway."""

    @property
    def max_connections(self) -> int: ...
    @property
    def max_head_bytes(self) -> int: ...
    @property
    def max_header_lines(self) -> int: ...
    @property
    def max_pipelined(self) -> int: ...
    @property
    def head_timeout_s(self) -> float: ...
    @property
    def body_timeout_s(self) -> float: ...
    @property
    def keep_alive_s(self) -> float: ...
    @property
    def send_timeout_s(self) -> float: ...
    @property
    def linger_s(self) -> float: ...


log = logging.getLogger("burstguard.core.gateway")

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 413: "Payload Too Large",
    429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout",
}  # fmt: skip

Header = tuple[str, str]
_ONCE = frozenset(("host", "authorization", "x-api-key"))  # ambiguous when repeated


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; a repeated header keeps its first."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    oversize: bool = False  # the body exceeds the server's limit (answer 413)
    keep_alive: bool = True
    error: tuple[int, str, str] | None = None  # refused unread: (status, message, code)
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
    def committed(self) -> bool:
        """A byte of the answer is out: a status can no longer be given (a started stream
        whose head is still held can still be answered whole, `send`)."""
        return self.finished or (self.started and not self._held) or bool(self._pending)

    @property
    def paused(self) -> bool:
        return self._conn.write_paused

    @property
    def stalled(self) -> bool:
        """The client was cut for leaving its answer unread past the send timeout."""
        return self._conn.stalled

    def _head(self, status: int, headers: Iterable[Header], extra: str) -> bytes:
        self.started = True
        if self._conn._server.closing:
            self._keep_alive = False  # stopping: the client reconnects elsewhere
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in headers]
        if not self._keep_alive:
            lines.append("connection: close\r\n")
        lines.append(extra)
        return "".join(lines).encode("latin-1")

    def send(self, status: int, body: bytes, headers: Iterable[Header] = ()) -> None:
        """The whole answer at once, with its content-length. A stream whose head is still
        held (not a byte written: its backend answered 200, then failed before a token)
        can still be answered this way instead."""
        if self.committed:
            raise RuntimeError("response already started")
        self._held = b""
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

    def write_soon(self, data: bytes, hold: bool = True) -> None:
        """One chunk of a started stream: written now if this stream's last write is at least
        one flush interval old (or `hold` is False: the client has no token yet), else held
        and written with the others at the next tick."""
        if not data or self.finished:
            return
        if not self._pending:
            flusher = self._conn.flusher
            now = flusher.now()
            if not hold or now - self._last_write >= flusher.interval_s:
                self._last_write = now
                self._out(self._chunk(data))
                return
            flusher.add(self)
        self._pending.append(data)
        if not hold:
            self.flush()

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
Refusal = tuple[int, str, str]
"""(status, message, error code) of an answer refused before its body is read."""
HeadCheck = Callable[[HttpRequest], Refusal | None]

# What the connection's one timer waits for (`HttpConnection._expect`).
_IDLE, _HEAD, _BODY = "idle", "head", "body"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_SLICE = 4096  # a larger read is parsed in slices of this, to stop at max_pipelined


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests and runs their handlers one at a time.

    Nothing a client sends or leaves unread is held without bound (docs/gateway.md,
    "Limits and timeouts"): reading pauses while the client's answers back up or a request
    waits its turn, so bytes stay in the kernel, not here; a head is counted as it is fed,
    complete or not; one timer per connection holds the head, body and idle deadlines, and
    one more (armed only while the socket is full) the send timeout.
    """

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = server.loop
        self.flusher = server.flusher
        limits = server.limits  # the ones read per request, as plain attributes
        self._max_head, self._max_lines = limits.max_head_bytes, limits.max_header_lines
        self._head_timeout_s, self._body_timeout_s = limits.head_timeout_s, limits.body_timeout_s
        self._keep_alive_s = limits.keep_alive_s
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._req: HttpRequest | None = None  # being parsed
        self._url = b""
        self._head_bytes = 0  # of the current head, counted by the parser's callbacks
        self._head_lines = 0
        self._repeated: str | None = None  # a header that must appear once, seen twice
        self._head_fed = 0  # bytes fed since the last complete head, outside any body
        self._in_message = False  # the parser is between a message's first and last byte
        self._in_body = False
        self._ready: deque[HttpRequest] = deque()  # parsed, waiting to be handled
        self._unparsed = b""  # read while max_pipelined requests waited: parsed after them
        self._continue: HttpRequest | None = None  # expects 100 Continue, not yet sent
        self._task: asyncio.Task[None] | None = None
        self._responder: Responder | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None
        self._deadline = math.inf
        self._stall: asyncio.TimerHandle | None = None
        self._read_paused = False
        self._broken = False  # stop parsing (bad request, oversize): close after answering
        self._lingering = False
        self.closed = False
        self.stalled = False  # cut because the client left its answer unread too long
        self.write_paused = False

    # -- transport events -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        server = self._server
        if len(server.connections) >= server.limits.max_connections:
            self.closed = True
            server.on_limit("max_connections")
            self._transport.close()
            return
        server.connections.add(self)
        self._expect(_HEAD, self._head_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.connections.discard(self)
        for timer in (self._timer, self._stall):
            if timer is not None:
                timer.cancel()
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
        self._stall = self._loop.call_later(self._server.limits.send_timeout_s, self._stalled)
        self._flow()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._responder is not None and self._responder.on_writable is not None:
            self._responder.on_writable()
        self._next()
        self._flow()

    def data_received(self, data: bytes) -> None:
        if self._broken:  # answering an error, or lingering: the rest is dropped
            return
        if len(data) <= _SLICE:
            self._parse(data)
        else:
            self._feed(data)
        if self._continue is not None:
            self._send_continue()
        self._next()
        self._flow()

    def _feed(self, data: bytes | memoryview) -> None:
        """Parses a large read a slice at a time, and stops once `max_pipelined` requests
        wait their turn: the rest is kept unparsed until they are served (reading is paused
        meanwhile), so many pipelined requests in one read are queued, not refused."""
        view, limit = memoryview(data), self._server.limits.max_pipelined
        for at in range(0, len(view), _SLICE):
            if len(self._ready) >= limit:
                self._unparsed = bytes(view[at:])
                return
            self._parse(view[at : at + _SLICE])
            if self._broken:
                return

    def _parse(self, data: bytes | memoryview) -> None:
        if not self._in_body:
            self._head_fed += len(data)  # reset when a head completes in this feed
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._bad(400, "protocol upgrades are not supported", "bad_http")
        except httptools.HttpParserError as exc:
            if not self._broken:  # the parser's own words stay in the log, not the answer
                log.debug("malformed HTTP request: %s", exc)
                self._bad(400, "malformed HTTP request", "bad_http")
        if self._head_fed > self._max_head and not self._in_body and not self._broken:
            self._bad(431, f"request head larger than {self._max_head} bytes", "head_too_large")

    # -- parser callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._head_bytes = self._head_lines = 0
        self._repeated = None
        self._in_message = True
        self._req = HttpRequest("", "", {})
        self._expect(_HEAD, self._head_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > self._max_head:
            self._head_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        self._head_lines += 1
        if self._head_bytes > self._max_head or self._head_lines > self._max_lines:
            self._head_too_large()
        assert self._req is not None
        key = name.decode("latin-1").lower()
        if key in self._req.headers and key in _ONCE:
            self._repeated = key
        self._req.headers.setdefault(key, value.decode("latin-1"))

    def _head_too_large(self) -> NoReturn:
        if self._head_lines > self._max_lines:
            self._bad(431, f"more than {self._max_lines} header lines", "too_many_headers")
        else:
            self._bad(431, f"request head larger than {self._max_head} bytes", "head_too_large")
        raise httptools.HttpParserError("head too large")

    def on_headers_complete(self) -> None:
        req = self._req
        assert req is not None
        refusal = self._refusal(req)
        if refusal is not None:  # answered once, before any handler sees it
            self._bad(400, refusal, "bad_http")
            raise httptools.HttpParserError(refusal)
        self._head_fed = 0
        self._in_body = True
        self._expect(_BODY, self._body_timeout_s)
        req.method = self._parser.get_method().decode("latin-1")
        req.path = httptools.parse_url(self._url).path.decode("latin-1") if self._url else "/"
        req.keep_alive = bool(self._parser.should_keep_alive())
        req.http11 = self._parser.get_http_version() != "1.0"
        limit = self._server.max_body_bytes
        declared = req.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            req.oversize = True
            self._server.on_limit("body_too_large")
            self._deliver(req, broken=True)  # answered now; the body that follows is not read
        elif req.headers.get("expect", "").lower() == "100-continue":
            self._continue = req  # sent when its turn comes and the head passes its checks

    def _refusal(self, req: HttpRequest) -> str | None:
        """Why a head is refused whatever its route: a protocol switch (the gateway speaks
        HTTP/1.1 only; refused before anything is forwarded), CONNECT, or a Host or
        Authorization header missing or repeated (RFC 9112 3.2: an HTTP/1.1 request has
        exactly one Host; two credentials leave the one that counts ambiguous)."""
        if "upgrade" in req.headers:
            return "protocol upgrades are not supported"
        if self._parser.get_method() == b"CONNECT":
            return "CONNECT is not supported"
        if self._repeated is not None:
            return f"the {self._repeated} header appears more than once"
        if "host" not in req.headers and self._parser.get_http_version() != "1.0":
            return "an HTTP/1.1 request needs a Host header"
        return None

    def on_body(self, body: bytes) -> None:
        req = self._req
        if req is None or req.oversize:
            return
        req._size += len(body)
        if req._size > self._server.max_body_bytes:
            req.oversize = True
            self._server.on_limit("body_too_large")
            self._deliver(req, broken=True)
            raise httptools.HttpParserError("body too large")
        req._chunks.append(body)

    def on_message_complete(self) -> None:
        self._in_message = self._in_body = False
        self._waiting_for, self._deadline = None, math.inf
        req = self._req
        if req is None or req.oversize:
            return
        if self._continue is req:
            self._continue = None  # the client sent its body without waiting for 100
        req.body = b"".join(req._chunks)
        req._chunks = []
        req.received = time.monotonic()
        self._deliver(req, broken=False)

    def _deliver(self, req: HttpRequest, broken: bool) -> None:
        self._req = None
        if broken:
            req.keep_alive = False
            self._broken = True
        self._ready.append(req)

    def _bad(self, status: int, message: str, reason: str) -> None:
        """A request that cannot be served: answered (after those before it), then closed."""
        if self._broken:
            return  # already answering one, and closing after it
        self._broken = True
        self._req = self._continue = None
        self._server.on_limit(reason)
        error = (status, message, "bad_request")
        self._ready.append(HttpRequest("", "", {}, keep_alive=False, error=error))

    def _send_continue(self) -> None:
        """`100 Continue` once the request's turn has come and its head passes the server's
        checks (auth): never in the middle of an earlier answer, never before a 401."""
        req = self._continue
        if req is None or self._task is not None or self._ready or self._broken:
            return
        self._continue = None
        refusal = self._server.check_head(req)
        if refusal is None:
            self.write(_CONTINUE)
            return
        self._broken = True  # the body is not read; the connection closes after the answer
        self._req = None
        self._ready.append(HttpRequest(req.method, req.path, req.headers, keep_alive=False,
                                       error=refusal))  # fmt: skip

    # -- timers ---------------------------------------------------------------------

    def _expect(self, what: str, within_s: float) -> None:
        """Sets what the client must do next, and by when. The timer only moves earlier:
        a later deadline is stored and the timer re-armed when it fires (no timer churn)."""
        self._waiting_for = what
        self._deadline = deadline = self._loop.time() + within_s
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(deadline, self._on_deadline)

    def _on_deadline(self) -> None:
        self._timer = None
        if self.closed or self._broken or self._waiting_for is None:
            return  # (broken: an error is being answered, then the connection closes)
        if self._loop.time() < self._deadline:
            if self._deadline != math.inf:  # else `_expect` arms it again
                self._timer = self._loop.call_at(self._deadline, self._on_deadline)
            return
        what, self._waiting_for = self._waiting_for, None
        limits = self._server.limits
        if what == _IDLE:
            self.close()
        elif what == _HEAD and not self._in_message:  # not a byte of a request: just close
            self._server.on_limit("head_timeout")
            self.close()
        else:
            took = limits.head_timeout_s if what == _HEAD else limits.body_timeout_s
            self._bad(408, f"request {what} not received within {took:g} s", f"{what}_timeout")
            self._next()

    def _stalled(self) -> None:
        """The client left its answer unread for the whole send timeout: cut it (a stream's
        handler is cancelled and its upstream aborted, as when the client hangs up)."""
        self._stall = None
        if self.closed or self._transport is None:
            return
        self.stalled = True
        self._server.on_limit("client_stalled")
        self.closed = True
        self._transport.abort()

    # -- flow control ---------------------------------------------------------------

    def _flow(self) -> None:
        """Reads only while the client's answers drain and no request waits its turn: the
        bytes of a client that sends faster than it reads stay in the kernel's buffers."""
        hold = self.write_paused or bool(self._ready) or (
            self._task is not None and self._in_message
        )  # fmt: skip
        if hold == self._read_paused or self.closed or self._lingering:
            return
        assert self._transport is not None
        self._read_paused = hold
        if hold:
            self._transport.pause_reading()
            self._deadline = math.inf  # not the client's fault while we do not read
        else:
            self._transport.resume_reading()
            if self._waiting_for == _HEAD:
                self._expect(_HEAD, self._head_timeout_s)
            elif self._waiting_for == _BODY:
                self._expect(_BODY, self._body_timeout_s)

    # -- running handlers -----------------------------------------------------------

    def _next(self) -> None:
        """Starts the handler of the oldest parsed request, if none is running and the
        client is reading what it was sent."""
        if self._task is not None or not self._ready or self.closed or self.write_paused:
            return
        req = self._ready.popleft()
        self._responder = Responder(self, req.keep_alive, req.http11)
        self._task = self._loop.create_task(self._run(req, self._responder))

    async def _run(self, req: HttpRequest, resp: Responder) -> None:
        server = self._server
        try:
            if req.error is not None:
                server.write_error(resp, *req.error)
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
            if not resp.committed:
                server.write_error(resp, 500, "internal gateway error", "internal_error")
        finally:
            self._task = None
            self._responder = None
            if not resp.finished:  # a handler that ended without answering: nothing to reuse
                self.close()
            elif not self.closed and not self._lingering:
                if self._unparsed and len(self._ready) < server.limits.max_pipelined:
                    unparsed, self._unparsed = self._unparsed, b""
                    self._feed(unparsed)
                if self._continue is not None:
                    self._send_continue()
                if self._ready:
                    self._next()
                elif not self._in_message:
                    self._expect(_IDLE, self._keep_alive_s)
                self._flow()

    def response_done(self, keep_alive: bool) -> None:
        """The answer is written; a connection that is not kept alive closes now."""
        if not keep_alive:
            if self._broken:
                self._linger()
            else:
                self.close()

    # -- writing, closing -----------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()

    def _linger(self) -> None:
        """Closes after an answer to a request that was not read to its end: half-closes,
        then drops what the client still sends for a moment (nginx's lingering close), so
        the client reads the answer instead of a reset."""
        transport = self._transport
        linger_s = self._server.limits.linger_s
        if transport is None or self.closed or self._lingering:
            return
        if linger_s <= 0 or not transport.can_write_eof():
            self.close()
            return
        self._lingering = True
        transport.write_eof()  # after what is buffered; the client sees the answer, then EOF
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(linger_s, self.close)

    @property
    def busy(self) -> bool:
        return self._task is not None or bool(self._ready)


class HttpServer:
    """Listens, owns the connections, and stops gracefully on SIGINT/SIGTERM."""

    def __init__(
        self, handler: Handler, write_error: ErrorWriter, *, max_body_bytes: int,
        limits: ServerLimits, flush_interval_s: float = 0.0,
        check_head: HeadCheck = lambda req: None,
        on_limit: Callable[[str], None] = lambda reason: None,
    ) -> None:  # fmt: skip
        """`check_head` refuses a request from its head alone (before `100 Continue`);
        `on_limit` is told each time a client trips a limit (for a metric)."""
        self.handler = handler
        self.write_error = write_error
        self.check_head = check_head
        self.on_limit = on_limit
        self.max_body_bytes = max_body_bytes
        self.limits = limits
        self.connections: set[HttpConnection] = set()
        self.closing = False  # stopping: every answer closes its connection
        self.loop: asyncio.AbstractEventLoop
        self.flusher: Flusher
        self._flush_interval_s = flush_interval_s

    async def serve(
        self, host: str, port: int, on_ready: Callable[[], None] = lambda: None,
        drain_s: float = 10.0, on_stop: Callable[[float], None] = lambda drain_s: None,
        on_deadline: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        """Serves until SIGINT or SIGTERM; then stops accepting and waits up to `drain_s`
        for open answers. `on_stop(drain_s)` is told at once (the gateway answers what it
        queued), `on_deadline()` at the drain's end, before the connections close (the
        gateway ends the streams still open with an error event); answers written then
        are flushed first. From the stop on every answer says `connection: close`."""
        stop = asyncio.Event()
        server = await self.listen(host, port)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, stop.set)
        on_ready()
        try:
            await stop.wait()
        finally:
            server.close()
            self.closing = True
            deadline = self.loop.time() + drain_s
            for conn in list(self.connections):
                if not conn.busy:
                    conn.close()
            on_stop(drain_s)
            while any(c.busy for c in self.connections) and self.loop.time() < deadline:
                await asyncio.sleep(0.05)
            if any(c.busy for c in self.connections):
                on_deadline()
                await asyncio.sleep(0.2)  # the last answers and error events go out
            for conn in list(self.connections):
                conn.close()

    async def listen(self, host: str, port: int) -> asyncio.Server:
        """Accepts on host:port. `serve` calls it; alone it makes a side listener (the
        gateway's /metrics port) that lives as long as the caller keeps it: `close` it."""
        self.loop = asyncio.get_running_loop()
        self.flusher = Flusher(self.loop, self._flush_interval_s)
        return await self.loop.create_server(
            lambda: HttpConnection(self), host, port, backlog=2048, reuse_address=True
        )

    def close(self, server: asyncio.Server) -> None:
        """Stops a side listener: no new connections, the open ones closed."""
        server.close()
        self.closing = True
        for conn in list(self.connections):
            conn.close()
