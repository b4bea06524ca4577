"""The gateway's live shell: a Starlette reverse proxy that drives GatewayCore with the real clock.

Per generation request: authenticate (401), read the body under the size limit (413),
validate the fields admission needs (400), pick class and tenant, `core.submit` (429 with
Retry-After at once when shed), wait in the gateway's queue until the dispatcher releases
it, then forward the body untouched to the backend over one shared aiohttp session and pass
the answer back — a stream chunk by chunk as the backend writes it, a JSON answer whole.

The dispatcher is `Gateway.pump`: it runs `core.dispatch` synchronously on every event
that can free or need room (a submit, a finish, a cancel, a scrape) and on a 50 ms tick
that also expires queued requests past their class deadline; a released request's waiting
handler is woken through its future. No task hop sits between a submit and its release, so
an idle gateway adds no queueing delay.

A client that hangs up is noticed by a watcher on the ASGI `receive` channel; it cancels
the handler: a queued request leaves the queue (`core.cancel`), an in-flight one has its
upstream connection closed, which makes vLLM (and the emulator) abort it and free its KV.
Every admitted request ends in exactly one outcome (completed, rejected, cancelled,
failed), counted once in `llm_request_total` and written as one JSON log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from burstguard.emulator.tokens import count_tokens
from burstguard.errors import UserError
from burstguard.gateway.api import (
    BadRequest,
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
    error_response,
    openapi_schema,
    parse_request,
)
from burstguard.gateway.auth import AuthError, Identity, KeyAuthenticator
from burstguard.gateway.backend_metrics import BackendMonitor
from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.core import TICK_S, GatewayCore
from burstguard.gateway.metrics import CONTENT_TYPE, GatewayMetrics, GaugeSnapshot
from burstguard.gateway.request import GatewayRequest
from burstguard.hangup import until_hangup
from burstguard.sse import says_why_it_ended

access_log = logging.getLogger("burstguard.gateway.access")
log = logging.getLogger("burstguard.gateway")

_READY_CACHE_S = 1.0
_SSE_TAIL = 4096
_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')

# Idle keep-alive on both sides, each shorter than the peer that closes: an upstream
# connection is dropped before the engine's uvicorn closes it (vLLM's default: 5 s), and
# clients' pools (aiohttp keeps idle connections 15 s) close theirs before the gateway does.
# Otherwise a request sent on a connection the other end is closing is lost as
# "server disconnected".
UPSTREAM_IDLE_S = 4.0
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
    arrival: float
    prompt_tokens: int
    outcome: str | None = None
    reason: str | None = None
    status: int = 0
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    output_tokens: int = 0
    live: bool = True  # a disconnect still matters (set False once the answer is written)
    gone: bool = False  # the client hung up


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


def _transport_error(exc: BaseException) -> tuple[int, str, str]:
    """(status, message, code) for a failure to talk to the backend."""
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return 504, "the backend did not answer in time", "backend_timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return 503, f"backend unreachable: {exc}", "backend_unreachable"
    return 502, f"backend connection failed: {type(exc).__name__}: {exc}", "backend_error"


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Gateway:
    """The gateway process: core, backend session and monitor, metrics and routes."""

    def __init__(self, config: GatewayConfig, clock: Callable[[], float] = time.monotonic) -> None:
        if not config.backends:
            raise UserError("backends: at least one backend is required (or pass --backend URL)")
        self.config = config
        self._clock = clock
        self.core = GatewayCore(config)
        self.auth = KeyAuthenticator(config.api_keys)
        self.backend = config.backends[0]
        self.base = self.backend.url.rstrip("/")
        self.metrics = GatewayMetrics(self._snapshot, clock)
        self._waiting: dict[str, asyncio.Future[Shed | None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.monitor: BackendMonitor | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._ready: tuple[float, bool] = (-math.inf, False)
        self._backend_up = True
        self._class_names = {c.name for c in config.classes}
        self._by_rank = sorted(config.classes, key=lambda c: c.rank)
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.backend.connect_timeout_s,
            sock_read=self.backend.read_timeout_s,
        )

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
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

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the gateway is not started")
        return self._session

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
        while True:
            await asyncio.sleep(TICK_S)
            try:
                for r in self.core.expire(self._clock()):
                    self._shed(r, "deadline")
                self.pump()
            except Exception:  # the dispatcher must never die
                log.exception("gateway tick failed")

    # -- request classification -----------------------------------------------------

    def _classify(
        self, ident: Identity | None, request: Request, gen: GenerationRequest
    ) -> tuple[str, str]:
        """(class, tenant): the key's tier and tenant win; then headers; then `priority`."""
        headers = request.headers
        tenant = ident.tenant if ident else None
        tenant = tenant or headers.get(self.config.tenant_header) or self.config.default_tenant
        if len(tenant) > 128:
            raise BadRequest(f"{self.config.tenant_header}: longer than 128 characters")
        if ident is not None:
            return ident.tier, tenant
        named = headers.get(self.config.class_header)
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

    async def _read_body(self, receive: Receive, request: Request) -> bytes | None:
        """The body, or None when it exceeds max_body_bytes."""
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise _ClientGone
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    # -- generation -----------------------------------------------------------------

    def endpoint(self, model: type[GenerationRequest], path: str) -> _GenerationEndpoint:
        return _GenerationEndpoint(self, model, path)

    async def generate(
        self, scope: Scope, receive: Receive, send: Send, model: type[GenerationRequest],
        path: str,
    ) -> None:  # fmt: skip
        arrival = self._clock()
        request = Request(scope, receive)
        try:
            ident = self.auth.authenticate(
                request.headers.get("authorization"), request.headers.get("x-api-key")
            )
            body = await self._read_body(receive, request)
            if body is None:
                limit = self.config.max_body_bytes
                return await self._refuse(
                    scope, receive, send, 413, f"request body larger than {limit} bytes",
                    "request_too_large",
                )  # fmt: skip
            gen = parse_request(model, body)
            cls, tenant = self._classify(ident, request, gen)
            prompt_tokens = gen.prompt_tokens()
        except AuthError as exc:
            return await self._refuse(scope, receive, send, 401, str(exc), "invalid_api_key")
        except BadRequest as exc:
            return await self._refuse(scope, receive, send, 400, str(exc), "invalid_request")
        except _ClientGone:
            return None

        if gen.priority is not None:  # consumed here; vLLM refuses it without its policy
            data = json.loads(body)
            data.pop("priority", None)
            body = _json_bytes(data)
        # a whole UUID4: backends may validate it (llama-cpp-python answers 400 otherwise)
        rid = uuid.uuid4().hex
        ex = _Exchange(rid, cls, tenant, path, gen.stream, arrival, prompt_tokens)
        self.metrics.arrived(cls)
        gr = GatewayRequest(rid, arrival, prompt_tokens, gen.output_limit(), cls, tenant, path)
        adm = self.core.submit(gr, arrival)
        for victim in adm.evicted:
            self._shed(victim, "evicted")
        if not adm.accepted:
            ex.outcome, ex.reason = "rejected", adm.reason
            await self._send_shed(scope, receive, send, ex, adm.retry_after_s)
            return self._close(ex)

        fut: asyncio.Future[Shed | None] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self.pump()
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.get_running_loop().create_task(_watch(receive, ex, task))
        try:
            await self._serve(scope, receive, send, ex, fut, body, request)
        except asyncio.CancelledError:
            if not ex.gone:
                self._end_unexpected(ex)
                raise
            task.uncancel()
            if ex.outcome is None:
                ex.outcome = "cancelled"
                self._waiting.pop(rid, None)
                self.core.cancel(rid, self._clock())
        except Exception:
            log.exception("request %s failed in the gateway", rid)
            self._end_unexpected(ex)
            if ex.status == 0:
                ex.status = 500
                with contextlib.suppress(Exception):
                    await error_response(500, "internal gateway error", "internal_error")(
                        scope, receive, send
                    )
        finally:
            ex.live = False
            watcher.cancel()
        self.pump()
        self._close(ex)

    def _end_unexpected(self, ex: _Exchange) -> None:
        if ex.outcome is None:
            ex.outcome = "failed"
            self._waiting.pop(ex.rid, None)
            self.core.fail(ex.rid, self._clock())

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, ex: _Exchange,
        fut: asyncio.Future[Shed | None], body: bytes, request: Request,
    ) -> None:  # fmt: skip
        shed = await fut
        if shed is not None:
            ex.outcome, ex.reason = "rejected", shed.reason
            ex.live = False
            await self._send_shed(scope, receive, send, ex, shed.retry_after_s)
            return
        released = self._clock()
        ex.queue_wait_s = released - ex.arrival
        self.metrics.queue_wait.labels(ex.cls).observe(ex.queue_wait_s)
        headers = {"content-type": "application/json", "accept-encoding": "identity",
                   "x-request-id": ex.rid}  # fmt: skip
        if not self.auth.enabled and (auth := request.headers.get("authorization")):
            headers["authorization"] = auth
        try:
            resp = await self.session.post(
                self.base + ex.route, data=body, headers=headers, timeout=self._timeout
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._backend_up = not isinstance(exc, aiohttp.ClientConnectorError)
            await self._fail(scope, receive, send, ex, *_transport_error(exc))
            return
        self._backend_up = True
        try:
            if resp.status != 200:
                raw = await resp.read()
                status, payload = upstream_error(resp.status, raw)
                self.metrics.errors.labels(f"http_{resp.status}").inc()
                ex.outcome, ex.reason, ex.status = "failed", f"backend_{resp.status}", status
                self.core.fail(ex.rid, self._clock())
                ex.live = False
                await JSONResponse(payload, status_code=status)(scope, receive, send)
            elif ex.stream:
                await self._pipe_stream(send, ex, resp)
            else:
                await self._pass_json(send, ex, resp)
        except (aiohttp.ClientError, TimeoutError) as exc:
            if ex.status == 0:
                await self._fail(scope, receive, send, ex, *_transport_error(exc))
            else:  # the stream had started: tell the client in-band and end it
                self.metrics.errors.labels(type(exc).__name__).inc()
                ex.outcome, ex.reason = "failed", "stream_broken"
                self.core.fail(ex.rid, self._clock())
                ex.live = False
                status, message, code = _transport_error(exc)
                err = {"error": {"message": message, "type": "upstream_error", "code": code}}
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body",
                                "body": b"data: " + _json_bytes(err) + b"\n\n",
                                "more_body": False})  # fmt: skip
        finally:
            resp.close()

    async def _pipe_stream(self, send: Send, ex: _Exchange, resp: aiohttp.ClientResponse) -> None:
        ex.status = 200
        ctype = resp.headers.get("content-type", "text/event-stream").encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", ctype), (b"cache-control", b"no-cache"),
            (b"x-request-id", ex.rid.encode()), (b"x-burstguard-class", ex.cls.encode()),
        ]})  # fmt: skip
        counter = _SseTokens(chat=ex.route.endswith("chat/completions"))
        first = True
        async for chunk in resp.content.iter_any():
            if first:
                first = False
                now = self._clock()
                ex.ttft_s = now - ex.arrival
                self.core.on_first_token(ex.rid, now)
                self.metrics.ttft.labels(ex.cls).observe(ex.ttft_s)
            counter.feed(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        ex.output_tokens = counter.tokens()
        if counter.finished():
            ex.outcome = "completed"
            self.core.on_finish(ex.rid, self._clock(), ex.output_tokens)
        else:  # the backend ended it early (llama-cpp-python does when another request comes)
            ex.outcome, ex.reason = "failed", "backend_cut_stream"
            self.metrics.errors.labels("backend_cut_stream").inc()
            self.core.fail(ex.rid, self._clock())
        ex.live = False
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pass_json(self, send: Send, ex: _Exchange, resp: aiohttp.ClientResponse) -> None:
        raw = await resp.read()
        ex.output_tokens = _json_tokens(raw)
        ex.outcome, ex.status = "completed", 200
        self.core.on_finish(ex.rid, self._clock(), ex.output_tokens)
        ex.live = False
        ctype = resp.headers.get("content-type", "application/json").encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", ctype), (b"content-length", str(len(raw)).encode()),
            (b"x-request-id", ex.rid.encode()), (b"x-burstguard-class", ex.cls.encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": raw, "more_body": False})

    async def _fail(
        self, scope: Scope, receive: Receive, send: Send, ex: _Exchange, status: int,
        message: str, code: str,
    ) -> None:  # fmt: skip
        self.metrics.errors.labels(code).inc()
        ex.outcome, ex.reason, ex.status = "failed", code, status
        self.core.fail(ex.rid, self._clock())
        ex.live = False
        await error_response(status, message, "upstream_error", code)(scope, receive, send)

    async def _send_shed(
        self, scope: Scope, receive: Receive, send: Send, ex: _Exchange, retry_s: float | None
    ) -> None:
        ex.status = 429
        header = retry_after_header(retry_s)
        msg = {
            "queue_full": "the gateway queue is full",
            "deadline": f"the {ex.cls} queue cannot start this request before its deadline",
            "evicted": "shed from the gateway queue to make room for higher-priority requests",
        }.get(ex.reason or "", "overloaded")
        await error_response(
            429, f"{msg}; retry after {header} s", "rate_limit_exceeded", ex.reason,
            headers={"retry-after": header, "x-request-id": ex.rid},
        )(scope, receive, send)  # fmt: skip

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, message: str, code: str
    ) -> None:
        self.metrics.invalid.labels(str(status)).inc()
        err_type = "authentication_error" if status == 401 else "invalid_request_error"
        headers = {"www-authenticate": "Bearer"} if status == 401 else None
        await error_response(status, message, err_type, code, headers=headers)(scope, receive, send)

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

    async def models(self, request: Request) -> Response:
        try:
            self.auth.authenticate(
                request.headers.get("authorization"), request.headers.get("x-api-key")
            )
        except AuthError as exc:
            return error_response(401, str(exc), "authentication_error", "invalid_api_key")
        try:
            timeout = aiohttp.ClientTimeout(total=10.0)
            async with self.session.get(self.base + "/v1/models", timeout=timeout) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    status, payload = upstream_error(resp.status, raw)
                    return JSONResponse(payload, status_code=status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, message, code = _transport_error(exc)
            return error_response(503, message, "upstream_error", code)
        ctype = resp.headers.get("content-type", "application/json")
        return Response(raw, status_code=200, media_type=ctype)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """200 when the backend answers (its /metrics scraped, or /v1/models), else 503."""
        if self.monitor is not None and self.monitor.has_metrics:
            return JSONResponse({"status": "ready", "backend": self.base})
        at, ok = self._ready
        now = self._clock()
        if now - at > _READY_CACHE_S:
            ok = await self._probe()
            self._ready = (now, ok)
        if ok:
            return JSONResponse({"status": "ready", "backend": self.base})
        return error_response(503, f"backend {self.base} is not reachable", "upstream_error",
                              "backend_unreachable")  # fmt: skip

    async def _probe(self) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with self.session.get(self.base + "/v1/models", timeout=timeout) as resp:
                await resp.read()
                return resp.status < 500
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self._openapi)

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

    def build(self) -> Starlette:
        self._openapi = openapi_schema()

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            await self.start()
            yield
            await self.stop()

        async def not_found(request: Request, exc: Exception) -> Response:
            return error_response(404, f"no route {request.url.path}", "invalid_request_error",
                                  "not_found")  # fmt: skip

        async def bad_method(request: Request, exc: Exception) -> Response:
            return error_response(405, f"method {request.method} not allowed",
                                  "invalid_request_error", "method_not_allowed")  # fmt: skip

        async def crashed(request: Request, exc: Exception) -> Response:
            return error_response(500, "internal gateway error", "internal_error")

        chat = self.endpoint(ChatCompletionRequest, "/v1/chat/completions")
        completions = self.endpoint(CompletionRequest, "/v1/completions")
        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/ready", self.ready, methods=["GET"]),
                Route("/metrics", self.metrics_endpoint, methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"]),
            ],
            exception_handlers={404: not_found, 405: bad_method, Exception: crashed},
            lifespan=lifespan,
        )


class _ClientGone(Exception):
    """The client hung up before its body arrived."""


class _GenerationEndpoint:
    """A raw ASGI endpoint (Starlette calls it with scope, receive, send)."""

    def __init__(self, gw: Gateway, model: type[GenerationRequest], path: str) -> None:
        self._gw = gw
        self._model = model
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._gw.generate(scope, receive, send, self._model, self._path)


async def _watch(receive: Receive, ex: _Exchange, task: asyncio.Task[Any]) -> None:
    """Waits for the client to hang up; then cancels its handler (if that still matters)."""
    await until_hangup(receive)
    if ex.live:
        ex.gone = True
        task.cancel()


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def build_app(config: GatewayConfig) -> Starlette:
    """The gateway as an ASGI app (uvicorn runs it)."""
    return Gateway(config).build()
