"""The gateway's live shell: a reverse proxy that drives GatewayCore with the real clock.

Per generation request: authenticate (401), take the body the server read under the size
limit (413), validate the fields admission needs (400), pick class and tenant,
`core.submit` (429 with Retry-After at once when shed), wait in the gateway's queue until
the dispatcher releases it, then forward the body untouched to the backend on a pooled
keep-alive connection and pass the answer back: a stream chunk by chunk as the backend
writes it (each backend read becomes one client write, in the same callback), a JSON
answer whole. The HTTP layers are the gateway's own (`gateway.http`, `gateway.upstream`):
a proxied token is the hot path, and ASGI layers cost more than the relay itself.

The dispatcher is `Gateway.pump`: it runs `core.dispatch` synchronously on every event
that can free or need room (a submit, a finish, a cancel, a scrape) and on a 50 ms tick
that also expires queued requests past their class deadline; a released request's waiting
handler is woken through its future. No task hop sits between a submit and its release, so
an idle gateway adds no queueing delay.

A client that hangs up cancels its handler (the server sees the connection close): a
queued request leaves the queue (`core.cancel`), an in-flight one has its upstream
connection closed, which makes vLLM (and the emulator) abort it and free its KV. Every
admitted request ends in exactly one outcome (completed, rejected, cancelled, failed),
counted once in `llm_request_total` and written as one JSON log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from burstguard.emulator.tokens import count_tokens
from burstguard.errors import UserError
from burstguard.gateway.api import (
    BadRequest,
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
    openapi_schema,
    parse_request,
)
from burstguard.gateway.auth import AuthError, Identity, KeyAuthenticator
from burstguard.gateway.backend_metrics import BackendMonitor
from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.core import TICK_S, GatewayCore
from burstguard.gateway.http import Header, HttpRequest, HttpServer, Responder
from burstguard.gateway.metrics import CONTENT_TYPE, GatewayMetrics, GaugeSnapshot
from burstguard.gateway.request import GatewayRequest
from burstguard.gateway.upstream import (
    UPSTREAM_IDLE_S,
    Call,
    Unreachable,
    UpstreamError,
    UpstreamPool,
    UpstreamTimeout,
)
from burstguard.sse import says_why_it_ended

access_log = logging.getLogger("burstguard.gateway.access")
log = logging.getLogger("burstguard.gateway")

_READY_CACHE_S = 1.0
_SSE_TAIL = 4096
_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')

# Clients' pools (aiohttp keeps idle connections 15 s) close theirs before the gateway
# does; otherwise a request sent on a connection being closed is lost as "server
# disconnected". (The upstream side, UPSTREAM_IDLE_S, is the same rule the other way.)
CLIENT_KEEP_ALIVE_S = 75


def retry_after_header(seconds: float | None) -> str:
    """Retry-After as delta-seconds: rounded up, at least 1."""
    if seconds is None or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


@dataclass(frozen=True, slots=True)
class Shed:
    """Why a queued request left without being served (the answer is a 429)."""

    reason: str
    retry_after_s: float


@dataclass(slots=True)
class _Exchange:
    """One request's story, for the outcome, the metrics and the log line."""

    rid: str
    cls: str
    tenant: str
    route: str
    stream: bool
    arrival: float  # the request read whole (HttpRequest.received)
    prompt_tokens: int
    own_s: float = 0.0  # the gateway's own time before the upstream write, queue wait excluded
    outcome: str | None = None
    reason: str | None = None
    status: int = 0
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    output_tokens: int = 0


class _SseTokens:
    """Counts output tokens in an SSE stream without buffering it.

    The usage chunk's `completion_tokens` wins when the stream carries one (the tail of
    the stream is kept for that); otherwise one `data:` event counts one token, minus the
    events that carry none (chat's role chunk, the finish chunk, `[DONE]`).
    """

    __slots__ = ("_carry", "_chat", "events", "tail")

    def __init__(self, chat: bool) -> None:
        self._chat = chat
        self._carry = b""
        self.events = 0
        self.tail = b""

    def feed(self, chunk: bytes) -> None:
        self.events += (self._carry + chunk).count(b"data:")
        self._carry = chunk[-4:]
        self.tail = (self.tail + chunk)[-_SSE_TAIL:]

    def finished(self) -> bool:
        """The stream said why it ended (its last choice chunk carries a finish_reason)."""
        return says_why_it_ended(self.tail)

    def tokens(self) -> int:
        found = _USAGE.findall(self.tail)
        if found:
            return int(found[-1])
        n = self.events
        if b"[DONE]" in self.tail:
            n -= 1
        n -= 1 + (1 if self._chat else 0)  # finish chunk, role chunk
        return max(0, n)


def _json_tokens(body: bytes) -> int:
    """completion_tokens of a non-streamed answer, or the answer text counted."""
    try:
        data = json.loads(body)
        usage = data.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
        text = ""
        for choice in data.get("choices") or []:
            msg = choice.get("message") or {}
            text += choice.get("text") or msg.get("content") or ""
        return count_tokens(text) if text else 0
    except (ValueError, AttributeError, TypeError):
        return 0


def upstream_error(status: int, body: bytes) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-shaped body a client gets for a backend's non-200 answer.

    Client errors (4xx) keep their status and, when the backend already sent OpenAI's
    shape, its body; server errors become 502 (503 stays 503), naming the backend status.
    """
    message = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    err: dict[str, Any] = {}
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            err = dict(data["error"])
        elif isinstance(data, dict) and "message" in data:  # vLLM's older {"object": "error"}
            err = {"message": data["message"], "type": data.get("type"), "code": data.get("code")}
    if 400 <= status < 500:
        out = {
            "message": str(err.get("message") or message),
            "type": str(err.get("type") or "invalid_request_error"),
            "param": err.get("param"),
            "code": None if err.get("code") is None else str(err.get("code")),
        }
        return status, {"error": out}
    mapped = 503 if status == 503 else 502
    text = str(err.get("message") or message)
    out = {
        "message": f"backend answered HTTP {status}: {text}",
        "type": "upstream_error",
        "param": None,
        "code": f"backend_{status}",
    }
    return mapped, {"error": out}


def _transport_error(exc: UpstreamError) -> tuple[int, str, str]:
    """(status, message, code) for a failure to talk to the backend."""
    if isinstance(exc, UpstreamTimeout):
        return 504, f"the backend did not answer in time ({exc})", "backend_timeout"
    if isinstance(exc, Unreachable):
        return 503, f"backend unreachable: {exc}", "backend_unreachable"
    return 502, f"backend connection failed: {exc}", "backend_error"


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


_JSON = ("content-type", "application/json")


def _send_json(resp: Responder, status: int, obj: Any, headers: tuple[Header, ...] = ()) -> None:
    resp.send(status, _json_bytes(obj), [_JSON, *headers])


def _send_error(
    resp: Responder, status: int, message: str, err_type: str, code: str | None = None,
    headers: tuple[Header, ...] = (),
) -> None:  # fmt: skip
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    err = {"message": message, "type": err_type, "param": None, "code": code}
    _send_json(resp, status, {"error": err}, headers)


class Gateway:
    """The gateway process: core, backend pool and monitor, metrics and routes."""

    def __init__(self, config: GatewayConfig) -> None:
        if not config.backends:
            raise UserError("backends: at least one backend is required (or pass --backend URL)")
        self.config = config
        self._clock = time.monotonic  # the HTTP server stamps requests on it too
        self.core = GatewayCore(config)
        self.auth = KeyAuthenticator(config.api_keys)
        self.backend = config.backends[0]
        self.base = self.backend.url.rstrip("/")
        self.metrics = GatewayMetrics(self._snapshot, self._clock)
        self._waiting: dict[str, asyncio.Future[Shed | None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._pool: UpstreamPool | None = None
        self.monitor: BackendMonitor | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._ready: tuple[float, bool] = (-math.inf, False)
        self._backend_up = True
        self._class_names = {c.name for c in config.classes}
        self._by_rank = sorted(config.classes, key=lambda c: c.rank)
        self._tenant_header = config.tenant_header.lower()
        self._class_header = config.class_header.lower()
        self._openapi = _json_bytes(openapi_schema())
        self._routes: dict[str, tuple[str, Route]] = {
            "/v1/chat/completions": ("POST", self._generation(ChatCompletionRequest)),
            "/v1/completions": ("POST", self._generation(CompletionRequest)),
            "/v1/models": ("GET", self.models),
            "/health": ("GET", self.health),
            "/ready": ("GET", self.ready),
            "/metrics": ("GET", self.metrics_endpoint),
            "/openapi.json": ("GET", self.openapi),
        }

    # -- lifecycle ------------------------------------------------------------------

    async def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Serves until SIGINT/SIGTERM (the CLI's event loop runs this)."""
        server = HttpServer(self.handle, self._refuse,
                            max_body_bytes=self.config.max_body_bytes,
                            keep_alive_s=CLIENT_KEEP_ALIVE_S,
                            flush_interval_s=self.config.stream_flush_ms / 1e3)  # fmt: skip
        await self.start()
        # Long-lived objects (config, schemas, metric families) leave the collector's view,
        # and young collections run less often: the relay allocates per chunk (gc was ~8%
        # of the gateway's CPU at 256 streams).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        try:
            await server.serve(self.config.listen.host, self.config.listen.port, on_ready)
        finally:
            await self.stop()

    async def start(self) -> None:
        self._pool = UpstreamPool(
            self.base, self.backend.connect_timeout_s, self.backend.read_timeout_s
        )
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_IDLE_S)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",)
        )
        metrics_url = self.backend.metrics_url or self.base + "/metrics"
        self.monitor = BackendMonitor(
            metrics_url, self._session, self.config.scrape_interval_s, on_scrape=self.pump,
            clock=self._clock,
        )  # fmt: skip
        self.monitor.start()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self.monitor is not None:
            await self.monitor.stop()
        if self._session is not None:
            await self._session.close()
        if self._pool is not None:
            self._pool.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the gateway is not started")
        return self._session

    @property
    def pool(self) -> UpstreamPool:
        if self._pool is None:
            raise RuntimeError("the gateway is not started")
        return self._pool

    # -- the dispatcher -------------------------------------------------------------

    def pump(self) -> None:
        """Releases what the core allows now and wakes those requests' handlers."""
        state = self.monitor.state if self.monitor is not None else None
        for r in self.core.dispatch(self._clock(), state):
            fut = self._waiting.pop(r.id, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _shed(self, req: GatewayRequest, reason: str) -> None:
        fut = self._waiting.pop(req.id, None)
        if fut is not None and not fut.done():
            out = req.max_tokens or self.config.predictor.default_max_tokens
            cost = req.prompt_tokens + out
            retry = self.core.retry_after(req.priority_class, self._clock(), cost)
            fut.set_result(Shed(reason, retry))

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.metrics.loop_lag.observe(max(0.0, loop.time() - due))
            try:
                for r in self.core.expire(self._clock()):
                    self._shed(r, "deadline")
                self.pump()
            except Exception:  # the dispatcher must never die
                log.exception("gateway tick failed")

    # -- routing --------------------------------------------------------------------

    async def handle(self, req: HttpRequest, resp: Responder) -> None:
        """Every request the server parsed: route it, or 404 / 405."""
        route = self._routes.get(req.path)
        if route is None:
            self._refuse(resp, 404, f"no route {req.path[:200]}", "not_found")
        elif req.method != route[0]:
            self._refuse(resp, 405, f"method {req.method} not allowed", "method_not_allowed")
        else:
            await route[1](req, resp)

    def _generation(self, model: type[GenerationRequest]) -> Route:
        async def endpoint(req: HttpRequest, resp: Responder) -> None:
            await self.generate(req, resp, model)

        return endpoint

    # -- request classification -----------------------------------------------------

    def _classify(
        self, ident: Identity | None, headers: dict[str, str], gen: GenerationRequest
    ) -> tuple[str, str]:
        """(class, tenant): the key's tier and tenant win; then headers; then `priority`."""
        tenant = ident.tenant if ident else None
        tenant = tenant or headers.get(self._tenant_header) or self.config.default_tenant
        if len(tenant) > 128:
            raise BadRequest(f"{self.config.tenant_header}: longer than 128 characters")
        if ident is not None:
            return ident.tier, tenant
        named = headers.get(self._class_header)
        if named is not None:
            if named not in self._class_names:
                known = ", ".join(sorted(self._class_names))
                header = self.config.class_header
                raise BadRequest(f"{header}: {named[:64]!r} is not one of {known}")
            return named, tenant
        if gen.priority is not None:  # vLLM's convention: lower runs first
            for c in self._by_rank:
                if c.rank >= gen.priority:
                    return c.name, tenant
            return self._by_rank[-1].name, tenant
        return self.config.default_class, tenant

    # -- generation -----------------------------------------------------------------

    async def generate(
        self, req: HttpRequest, resp: Responder, model: type[GenerationRequest]
    ) -> None:
        arrival = req.received
        body = req.body
        try:
            ident = self.auth.authenticate(
                req.headers.get("authorization"), req.headers.get("x-api-key")
            )
            gen = parse_request(model, body)
            cls, tenant = self._classify(ident, req.headers, gen)
            prompt_tokens = gen.prompt_tokens()
        except AuthError as exc:
            return self._refuse(resp, 401, str(exc), "invalid_api_key")
        except BadRequest as exc:
            return self._refuse(resp, 400, str(exc), "invalid_request")

        if gen.priority is not None:  # consumed here; vLLM refuses it without its policy
            data = json.loads(body)
            data.pop("priority", None)
            body = _json_bytes(data)
        # a whole UUID4: backends may validate it (llama-cpp-python answers 400 otherwise)
        rid = uuid.uuid4().hex
        ex = _Exchange(rid, cls, tenant, req.path, gen.stream, arrival, prompt_tokens)
        self.metrics.arrived(cls)
        gr = GatewayRequest(rid, arrival, prompt_tokens, gen.output_limit(), cls, tenant, req.path)
        ex.own_s = self._clock() - arrival  # read to the core; the rest is added at release
        adm = self.core.submit(gr, arrival)
        for victim in adm.evicted:
            self._shed(victim, "evicted")
        if not adm.accepted:
            ex.outcome, ex.reason = "rejected", adm.reason
            self._send_shed(resp, ex, adm.retry_after_s)
            return self._close(ex)

        fut: asyncio.Future[Shed | None] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self.pump()
        try:
            await self._serve(req, resp, ex, fut, body)
        except asyncio.CancelledError:
            if not resp.gone:
                self._end_unexpected(ex)
                raise
            if ex.outcome is None:  # the client hung up
                ex.outcome = "cancelled"
                self._waiting.pop(rid, None)
                self.core.cancel(rid, self._clock())
        except Exception:
            log.exception("request %s failed in the gateway", rid)
            self._end_unexpected(ex)
            if not resp.started:
                ex.status = 500
                _send_error(resp, 500, "internal gateway error", "internal_error")
        self.pump()
        self._close(ex)

    def _end_unexpected(self, ex: _Exchange) -> None:
        if ex.outcome is None:
            ex.outcome = "failed"
            self._waiting.pop(ex.rid, None)
            self.core.fail(ex.rid, self._clock())

    async def _serve(
        self, req: HttpRequest, resp: Responder, ex: _Exchange,
        fut: asyncio.Future[Shed | None], body: bytes,
    ) -> None:  # fmt: skip
        shed = await fut
        if shed is not None:
            ex.outcome, ex.reason = "rejected", shed.reason
            self._send_shed(resp, ex, shed.retry_after_s)
            return
        released = self._clock()
        ex.queue_wait_s = released - ex.arrival
        self.metrics.queue_wait.labels(ex.cls).observe(ex.queue_wait_s)
        headers = {"content-type": "application/json", "accept-encoding": "identity",
                   "x-request-id": ex.rid}  # fmt: skip
        if not self.auth.enabled and (auth := req.headers.get("authorization")):
            headers["authorization"] = auth
        call: Call | None = None
        try:
            call = await self.pool.start("POST", ex.route, body, headers)
            ex.own_s += call.sent_at - released
            counter = self._arm_relay(resp, ex, call) if ex.stream else None
            status = await call.response()
            self._backend_up = True
            if status != 200:
                raw = await call.read()
                code, payload = upstream_error(status, raw)
                self.metrics.errors.labels(f"http_{status}").inc()
                ex.outcome, ex.reason, ex.status = "failed", f"backend_{status}", code
                self.core.fail(ex.rid, self._clock())
                _send_json(resp, code, payload)
            elif counter is not None:
                await self._finish_relay(resp, ex, call, counter)
            else:
                await self._pass_json(resp, ex, call)
        except UpstreamError as exc:
            self._backend_up = not isinstance(exc, Unreachable)
            if not resp.started:
                self._fail(resp, ex, *_transport_error(exc))
            else:  # the stream had started: tell the client in-band and end it
                self.metrics.errors.labels(type(exc).__name__).inc()
                ex.outcome, ex.reason = "failed", "stream_broken"
                self.core.fail(ex.rid, self._clock())
                _, message, code = _transport_error(exc)
                err = {"error": {"message": message, "type": "upstream_error", "code": code}}
                resp.end(b"data: " + _json_bytes(err) + b"\n\n")
        finally:
            if call is not None:
                call.abort()  # a no-op once the answer ended; else the engine frees the KV

    def _arm_relay(self, resp: Responder, ex: _Exchange, call: Call) -> _SseTokens:
        """Sets the SSE pass-through to start when the backend answers 200: the stream's
        head and first bytes then go to the client from the very read that brought them,
        each later read as one chunk; the handler's task is not on the first-token path."""
        counter = _SseTokens(chat=ex.route.endswith("chat/completions"))
        first = True

        def sink(data: bytes) -> None:
            nonlocal first
            counter.feed(data)
            resp.write_soon(data)  # the first at once; later ones at most every flush interval
            if first:
                first = False
                now = self._clock()
                ex.ttft_s = now - ex.arrival
                self.core.on_first_token(ex.rid, now)
                self.metrics.ttft.labels(ex.cls).observe(ex.ttft_s)
                self.metrics.own_time.observe(ex.own_s + now - call.head_at)
            if resp.paused:
                call.pause(True)

        def on_head(status: int) -> None:
            if status != 200:
                return  # read whole and mapped to an error by the handler
            ex.status = 200
            resp.start_stream(200, [
                ("content-type", call.content_type or "text/event-stream"),
                ("cache-control", "no-cache"), ("x-request-id", ex.rid),
                ("x-burstguard-class", ex.cls),
            ])  # fmt: skip
            resp.on_writable = lambda: call.pause(False)
            call.stream_to(sink)

        call.on_head = on_head
        return counter

    async def _finish_relay(
        self, resp: Responder, ex: _Exchange, call: Call, counter: _SseTokens
    ) -> None:
        """Waits for the relayed stream's end, then counts its outcome and ends it."""
        await call.finished()
        ex.output_tokens = counter.tokens()
        if counter.finished():
            ex.outcome = "completed"
            self.core.on_finish(ex.rid, self._clock(), ex.output_tokens)
        else:  # the backend ended it early (llama-cpp-python does when another request comes)
            ex.outcome, ex.reason = "failed", "backend_cut_stream"
            self.metrics.errors.labels("backend_cut_stream").inc()
            self.core.fail(ex.rid, self._clock())
        resp.end()

    async def _pass_json(self, resp: Responder, ex: _Exchange, call: Call) -> None:
        raw = await call.read()
        ex.output_tokens = _json_tokens(raw)
        ex.outcome, ex.status = "completed", 200
        self.core.on_finish(ex.rid, self._clock(), ex.output_tokens)
        resp.send(200, raw, [
            ("content-type", call.content_type or "application/json"),
            ("x-request-id", ex.rid), ("x-burstguard-class", ex.cls),
        ])  # fmt: skip

    def _fail(self, resp: Responder, ex: _Exchange, status: int, message: str, code: str) -> None:
        self.metrics.errors.labels(code).inc()
        ex.outcome, ex.reason, ex.status = "failed", code, status
        self.core.fail(ex.rid, self._clock())
        _send_error(resp, status, message, "upstream_error", code)

    def _send_shed(self, resp: Responder, ex: _Exchange, retry_s: float | None) -> None:
        ex.status = 429
        header = retry_after_header(retry_s)
        msg = {
            "queue_full": "the gateway queue is full",
            "deadline": f"the {ex.cls} queue cannot start this request before its deadline",
            "evicted": "shed from the gateway queue to make room for higher-priority requests",
        }.get(ex.reason or "", "overloaded")
        _send_error(resp, 429, f"{msg}; retry after {header} s", "rate_limit_exceeded",
                    ex.reason, (("retry-after", header), ("x-request-id", ex.rid)))  # fmt: skip

    def _refuse(self, resp: Responder, status: int, message: str, code: str) -> None:
        self.metrics.invalid.labels(str(status)).inc()
        err_type = "authentication_error" if status == 401 else "invalid_request_error"
        headers = (("www-authenticate", "Bearer"),) if status == 401 else ()
        _send_error(resp, status, message, err_type, code, headers)

    def _close(self, ex: _Exchange) -> None:
        """Counts the outcome once and writes the request's log line."""
        outcome = ex.outcome or "failed"
        self.metrics.ended(ex.cls, outcome, ex.reason)
        if outcome == "completed" and ex.output_tokens:
            self.metrics.output_tokens.labels(ex.cls).inc(ex.output_tokens)
        if self.config.log_requests and access_log.isEnabledFor(logging.INFO):
            access_log.info(json.dumps({
                "id": ex.rid, "class": ex.cls, "tenant": ex.tenant, "route": ex.route,
                "stream": ex.stream, "outcome": outcome, "reason": ex.reason,
                "status": ex.status or None, "queue_wait_s": _round(ex.queue_wait_s),
                "ttft_s": _round(ex.ttft_s), "prompt_tokens": ex.prompt_tokens,
                "output_tokens": ex.output_tokens,
                "duration_s": _round(self._clock() - ex.arrival),
            }, separators=(",", ":")))  # fmt: skip

    # -- other routes ---------------------------------------------------------------

    async def models(self, req: HttpRequest, resp: Responder) -> None:
        try:
            self.auth.authenticate(req.headers.get("authorization"), req.headers.get("x-api-key"))
        except AuthError as exc:
            return self._refuse(resp, 401, str(exc), "invalid_api_key")
        try:
            timeout = aiohttp.ClientTimeout(total=10.0)
            async with self.session.get(self.base + "/v1/models", timeout=timeout) as up:
                raw = await up.read()
                ctype = up.headers.get("content-type", "application/json")
                status = up.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            message = f"backend unreachable: {type(exc).__name__}: {exc}"
            _send_error(resp, 503, message, "upstream_error", "backend_unreachable")
            return
        if status != 200:
            code, payload = upstream_error(status, raw)
            _send_json(resp, code, payload)
        else:
            resp.send(200, raw, [("content-type", ctype)])

    async def health(self, req: HttpRequest, resp: Responder) -> None:
        resp.send(200, b'{"status":"ok"}', [_JSON])

    async def ready(self, req: HttpRequest, resp: Responder) -> None:
        """200 when the backend answers (its /metrics scraped, or /v1/models), else 503."""
        ok = self.monitor is not None and self.monitor.has_metrics
        if not ok:
            at, ok = self._ready
            now = self._clock()
            if now - at > _READY_CACHE_S:
                ok = await self._probe()
                self._ready = (now, ok)
        if ok:
            _send_json(resp, 200, {"status": "ready", "backend": self.base})
        else:
            message = f"backend {self.base} is not reachable"
            _send_error(resp, 503, message, "upstream_error", "backend_unreachable")

    async def _probe(self) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with self.session.get(self.base + "/v1/models", timeout=timeout) as up:
                await up.read()
                return up.status < 500
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def metrics_endpoint(self, req: HttpRequest, resp: Responder) -> None:
        resp.send(200, self.metrics.render(), [("content-type", CONTENT_TYPE)])

    async def openapi(self, req: HttpRequest, resp: Responder) -> None:
        resp.send(200, self._openapi, [_JSON])

    def _snapshot(self) -> GaugeSnapshot:
        s = self.core.stats
        b = self.monitor.state if self.monitor is not None else None
        up = self._backend_up if self.monitor is None else (
            self._backend_up and (self.monitor.reachable or self.monitor.scrapes == 0)
        )  # fmt: skip
        return GaugeSnapshot(
            queue_depth=s.queue_depth,
            queue_tokens=sum(s.queue_tokens.values()),
            in_flight=s.in_flight_requests,
            in_flight_tokens=s.in_flight_tokens,
            in_flight_cap=int(s.limit_requests),
            in_flight_tokens_cap=None if math.isinf(s.limit_tokens) else int(s.limit_tokens),
            service_rate=s.service_rate,
            backend_waiting=None if b is None or b.waiting is None else float(b.waiting),
            backend_running=None if b is None or b.running is None else float(b.running),
            backend_kv_usage=b.kv_usage if b is not None else None,
            backend_up=up,
        )


Route = Callable[[HttpRequest, Responder], Awaitable[None]]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
