"""`burstguard epp`: GatewayCore as the Endpoint Picker of a Gateway API gateway (Envoy ext_proc).

The standalone gateway (`live.gateway.server`) is a proxy: it holds the client's connection and
makes the upstream call itself. Here the user's gateway (Envoy, Istio, kgateway, ...) holds
both and asks this process, over one ext_proc gRPC stream per HTTP request, where the
request goes. The same core decides (`core.gateway.events` is the whole protocol); this shell
turns the stream's messages into events and the core's effects into ext_proc answers:

- request headers and body (streamed; the body is gathered whole, under `max_body_bytes`):
  authenticate (an API key's tier and tenant, 401), validate (400), classify (key tier,
  class header, InferenceObjective header, `x-slo-ttft-ms`, vLLM `priority`; tenant from
  the key, the tenant header or `x-llm-d-inference-fairness-id`), hand the core an
  `Arrive`, and answer nothing until the core does: Envoy holds the request meanwhile.
  A `Release` becomes the request_headers answer naming the backend (header and `envoy.lb`
  metadata, then up to `epp.fallbacks` other healthy backends for Envoy's retries) with
  the body echoed back edited as the standalone gateway edits it (usage asked for on a
  stream, vLLM's `priority`); a `Reject` becomes an ImmediateResponse 429 in OpenAI's
  error shape with Retry-After, or 503 when no backend has been healthy (`no_backend`) or
  none in the gateway's subset hint is known.
- response headers and body (streamed): each chunk is echoed back at once (a stream's
  usage chunk is dropped again when its client did not ask for it), and read on the way:
  the first content is `FirstToken`, the end of the answer `Finish` with the tokens its
  usage gives, a 5xx `BackendFailed` (the breaker learns; the answer is Envoy's already),
  another error `Fail`, and a stream that ends before the answer did (the client hung up,
  Envoy reset it) `Cancel`. So slots, the predictor, fairness and /metrics stay exact.

Preemption without resume (`epp.preempt: end`, `core.gateway.epp`): when the core preempts
a request (`Preempt(resume=False)`, already counted failed), the picker ends its answer:
an OpenAI error event (code `preempted`) with end_of_stream once its body has begun
(FULL_DUPLEX_STREAMED), else an ImmediateResponse 503 with Retry-After; either way Envoy
resets the upstream, so the engine frees the slot (checked against a real Envoy).

Not here, because they need the proxy itself: resuming a preempted request (the picker
holds no client stream to continue: backends' `resume` is off, and without
`epp.preempt: end` so is `preemptible`, with a warning), failover of a
started request (Envoy retries to the fallbacks before the first byte; the core only
learns the failure), and the HTTP limits (`limits.*` on connections, heads, timeouts:
the gateway's own settings apply). Shared state through Redis is not supported: run one
picker per pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from burstguard.core.gateway.api import (
    BadRequest,
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
)
from burstguard.core.gateway.auth import AuthError, check_bearer
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.epp import epp_config, preempt_ends
from burstguard.core.gateway.events import (
    Abandon,
    Abort,
    Arrive,
    BackendFailed,
    Cancel,
    Circuit,
    Effect,
    Fail,
    FirstToken,
    Forget,
    Preempt,
    Reject,
    Release,
)
from burstguard.http.client import UPSTREAM_IDLE_S
from burstguard.http.server import HttpRequest, HttpServer, Responder
from burstguard.live.epp import protocol
from burstguard.live.gateway.errors import SHED_MESSAGES, json_bytes, retry_after_header, send_error
from burstguard.live.gateway.fleet_metrics import FleetCollector
from burstguard.live.gateway.metrics import CONTENT_TYPE
from burstguard.live.gateway.relay import SseRelay, json_tokens, upstream_body
from burstguard.live.gateway.shell import CoreShell, Exchange
from burstguard.wire.outcomes import Outcome, Reason

log = logging.getLogger("burstguard.core.gateway")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
HEALTH_SERVICES = ("liveness", "readiness", EXT_PROC_SERVICE)

_GENERATION: dict[str, type[GenerationRequest]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
}
_MAX_ANSWER_BYTES = 16 << 20  # a JSON answer kept to count its tokens (past it: counted 0)


@dataclass(slots=True)
class _Exchange(Exchange):
    """One admitted request's story through the gateway: what `Exchange` says, and where
    it was sent."""

    include_usage: bool = False  # its client asked for the usage chunk
    endpoints: list[str] = field(default_factory=list)
    served: str | None = None  # where the gateway says it went (rarely said)
    answer: list[bytes] = field(default_factory=list)  # a JSON answer, to count its tokens
    answer_bytes: int = 0


@dataclass(slots=True)
class _Stream:
    """One ext_proc stream: one HTTP request through the gateway."""

    headers: dict[str, str] = field(default_factory=dict)
    metadata: base_pb2.Metadata | None = None
    body: list[bytes] = field(default_factory=list)
    size: int = 0
    decided: bool = False  # the request_headers answer went (or an immediate answer)
    done: bool = False  # answered at once: the stream is over
    duplex: bool = True  # the response body comes FULL_DUPLEX_STREAMED (else STREAMED)
    ex: _Exchange | None = None
    context: Any = None  # its gRPC stream, for an answer no message asked for (a cut)
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)  # one write at a time
    answering: bool = False  # the response's headers were answered: its body has begun
    cut: bool = False  # preempted: its answer was ended; nothing more is answered


class EndpointPicker(CoreShell):
    """The picker process: core, fleet monitor, metrics, the ext_proc and health services."""

    _what = "picker"

    def __init__(self, config: GatewayConfig) -> None:
        config, self.notes = epp_config(config)
        super().__init__(config, preempt_ends=preempt_ends(config))
        self._streams: dict[str, _Stream] = {}  # released and not ended, by request id
        self._cuts: set[asyncio.Task[None]] = set()
        self.metrics.registry.register(FleetCollector(self.fleet, self._clock, None, self.names))
        self.health = health_aio.HealthServicer()
        self._session: aiohttp.ClientSession | None = None
        self._grpc: grpc.aio.Server | None = None
        self.grpc_port: int | None = None
        epp = config.epp
        self._objective_header = epp.objective_header.lower()
        self._fairness_header = epp.fairness_header.lower()
        self._slo_header = epp.slo_ttft_header.lower()

    # -- lifecycle ------------------------------------------------------------------

    async def run(self, on_ready: Any = lambda: None) -> None:
        """Serves ext_proc (gRPC) and /metrics (HTTP) until SIGINT/SIGTERM."""
        http = HttpServer(self._http, self._refuse, max_body_bytes=1024,
                          limits=self.config.limits)  # fmt: skip
        try:
            await self.start()
            await http.serve(self.config.listen.host, self.config.epp.metrics_port, on_ready)
        finally:
            await self.stop()

    async def start(self) -> None:
        """Discovery, scrapers and probes, the tick, the gRPC server."""
        for note in self.notes:
            log.warning("%s", note)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_IDLE_S)
        self._session = aiohttp.ClientSession(connector=connector)
        cfg = self.config
        await self._start_monitor(self._session)
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        server = grpc.aio.server()
        pb_grpc.add_ExternalProcessorServicer_to_server(_Servicer(self), server)
        health_pb2_grpc_add(self.health, server)
        self.grpc_port = server.add_insecure_port(f"{cfg.listen.host}:{cfg.epp.grpc_port}")
        await server.start()
        self._grpc = server
        for name in ("", *HEALTH_SERVICES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self) -> None:
        if self._grpc is not None:
            await self.health.enter_graceful_shutdown()
            await self._grpc.stop(grace=5.0)
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self.monitor is not None:
            await self.monitor.stop()
        if self._session is not None:
            await self._session.close()

    # -- the core's effects carried out ----------------------------------------------

    def _carry_out(self, effect: Effect) -> None:
        if isinstance(effect, Forget):
            if self.monitor is not None:
                self.monitor.forget(effect.backend)
            return
        if isinstance(effect, Circuit):
            log.warning("backend %s: circuit %s", self.names(effect.backend), effect.state)
            return
        if isinstance(effect, Abort):  # never: `epp_config` turns backend_deadlines off
            return
        if isinstance(effect, Preempt):  # never resumed here (`epp_config`)
            st = self._streams.get(effect.req.id)
            if st is not None:
                self._preempted(st)
            return
        # not waiting: an Abandon after a failure whose answer Envoy already gave
        self._wake(effect.req.id, effect)

    def _tenant_hint(self, headers: Mapping[str, str]) -> str | None:
        return headers.get(self._fairness_header)

    def _class_hint(self, headers: Mapping[str, str], gen: GenerationRequest) -> str | None:
        """The InferenceObjective, then a TTFT objective (unless vLLM's priority names one)."""
        return self.classifier.objective(headers.get(self._objective_header)) or (
            self.classifier.for_ttft_slo(headers.get(self._slo_header))
            if gen.priority is None else None
        )  # fmt: skip

    # -- one ext_proc stream --------------------------------------------------------

    async def process(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Serves one ext_proc stream (one HTTP request) to its end: messages in, answers
        out. A stream that ends before its answer did is a client gone (`Cancel`)."""
        st = _Stream(context=context)
        try:
            while not st.done:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    break
                if st.cut:
                    continue  # its answer was ended: what Envoy still sends goes unanswered
                assert isinstance(msg, pb.ProcessingRequest)
                kind = msg.WhichOneof("request")
                if kind == "response_body":  # most messages: no coroutine on their path
                    answers = self._response_body(st, msg.response_body)
                else:
                    answers = await self._on(st, msg, kind)
                if answers:
                    async with st.writing:
                        if st.cut:  # ended while this message was read
                            continue
                        for answer in answers:
                            await context.write(answer)
        finally:
            ex = st.ex
            if ex is not None:
                self._streams.pop(ex.rid, None)
            if ex is not None and ex.outcome is None:
                if ex.status == 200 and ex.relay is not None and ex.relay.finished():
                    self._answered(st)  # whole: its client closed after `[DONE]` (openai's SDK)
                else:  # hung up, or Envoy reset it
                    ex.outcome = Outcome.CANCELLED
                    self.event(Cancel(ex.rid))
                    self._close(ex)

    async def _on(
        self, st: _Stream, msg: pb.ProcessingRequest, kind: str | None
    ) -> list[pb.ProcessingResponse]:
        if kind == "request_headers":
            if msg.HasField("protocol_config"):  # the modes the gateway's filter set
                st.duplex = protocol.duplex_response(msg.protocol_config)
            st.headers = protocol.header_map(msg.request_headers.headers)
            st.metadata = msg.metadata_context
            if msg.request_headers.end_of_stream:
                return await self._decide(st, body_follows=False)
            return []
        if kind == "request_body":
            chunk = msg.request_body.body
            st.size += len(chunk)
            if st.size > self.config.max_body_bytes:
                st.done = True
                self.metrics.invalid.labels("413").inc()
                most = self.config.max_body_bytes
                return [_error(413, f"body larger than {most} bytes", "invalid_request_error",
                               "body_too_large")]  # fmt: skip
            st.body.append(chunk)
            if msg.request_body.end_of_stream and not st.decided:
                return await self._decide(st, body_follows=True)
            return []
        if kind == "request_trailers":
            out = [] if st.decided else await self._decide(st, body_follows=True, ends=False)
            return out if st.done else [*out, protocol.trailers_answer("request_trailers")]
        if kind == "response_headers":
            return [self._response_headers(st, msg)]
        if kind == "response_trailers":
            self._answered(st)
            return [protocol.trailers_answer("response_trailers")]
        return []

    async def _decide(
        self, st: _Stream, body_follows: bool, ends: bool = True
    ) -> list[pb.ProcessingResponse]:
        """The request is whole: the answer naming its endpoint (after the core released
        it), or an immediate one. `ends`: the echoed body ends the request (no trailers)."""
        st.decided = True
        path = st.headers.get(":path", "").split("?", 1)[0]
        model = _GENERATION.get(path)
        if model is None or st.headers.get(":method") != "POST":
            return self._pass(st, body_follows, ends)
        try:
            a = self._admit(model, b"".join(st.body), st.headers)
        except AuthError as exc:
            st.done = True
            self.metrics.invalid.labels("401").inc()
            return [_error(401, str(exc), "authentication_error", "invalid_api_key",
                           (("www-authenticate", "Bearer"),))]  # fmt: skip
        except BadRequest as exc:
            st.done = True
            self.metrics.invalid.labels("400").inc()
            return [_error(400, str(exc), "invalid_request_error", "invalid_request")]
        allowed = self._subset(st)
        if allowed is not None and not allowed:
            st.done = True
            return [_error(503, "no endpoint of the gateway's subset hint is in the pool",
                           "upstream_error", "no_endpoint_in_subset")]  # fmt: skip
        arrival = self._clock()
        gen = a.gen
        gr = self._arrival(a, path, arrival, st.headers, resumable=False, allowed=allowed)
        rid = gr.id
        opts = gen.stream_options
        ex = _Exchange(rid, a.cls, a.tenant, path, gen.stream, arrival, a.prompt_tokens,
                       include_usage=opts is not None and bool(opts.include_usage))  # fmt: skip
        fut = self._expect(rid)
        # known from now: the core may preempt it once released, before this coroutine
        # runs again (then it is answered by the cut, not by the pick)
        st.ex = ex
        self._streams[rid] = st
        self.event(Arrive(gr))
        try:
            effect = await fut
        except asyncio.CancelledError:  # Envoy closed the stream: the client went away
            self._waiting.pop(rid, None)
            if ex.outcome is None:
                ex.outcome = Outcome.CANCELLED
                self.event(Cancel(rid))
                self._close(ex)
            raise
        if st.cut:
            return []
        if isinstance(effect, Reject):
            st.done = True
            return [self._shed(ex, effect)]
        if isinstance(effect, Abandon):  # not before a release; answered as a failure
            st.done = True
            ex.outcome, ex.reason, ex.status = Outcome.FAILED, effect.outcome, 503
            self._close(ex)
            return [_error(503, "no backend", "upstream_error", "backend_unreachable")]
        assert isinstance(effect, Release)
        self._released(ex)
        ex.endpoints = self._endpoints(effect.backend, allowed)
        out_body = json_bytes(upstream_body(a.data, gen.stream, effect.priority))
        headers = [("content-length", str(len(out_body))), ("x-request-id", rid),
                   ("x-burstguard-class", a.cls)]  # fmt: skip
        return [
            protocol.pick(ex.endpoints, headers, remove=("transfer-encoding",)),
            *protocol.streamed_body("request_body", out_body, ends),
        ]

    def _pass(self, st: _Stream, body_follows: bool, ends: bool) -> list[pb.ProcessingResponse]:
        """Anything but a generation (GET /v1/models, ...): a healthy endpoint, no queue."""
        stats = self.fleet.stats(self._clock())
        ok = [b.url for b in stats if b.active and b.healthy and b.up]
        if not ok:
            st.done = True
            return [_error(503, "no ready endpoint", "upstream_error", "backend_unreachable")]
        out = [
            protocol.pick([protocol.endpoint_of(u) for u in ok[: 1 + self.config.epp.fallbacks]])
        ]
        if body_follows:
            out += protocol.streamed_body("request_body", b"".join(st.body), ends)
        return out

    def _subset(self, st: _Stream) -> frozenset[str] | None:
        """The backends the gateway's subset hint allows (None: no hint). A hint entry is
        `ip:port`, or `ip` for every port of that address."""
        hint = protocol.subset_hint(st.metadata) if st.metadata is not None else None
        if hint is None:
            return None
        wanted = set(hint)
        out = set()
        for url in self.fleet.backends:
            ep = protocol.endpoint_of(url)
            if ep in wanted or ep.rsplit(":", 1)[0] in wanted:
                out.add(url)
        return frozenset(out)

    def _endpoints(self, backend: str, allowed: frozenset[str] | None) -> list[str]:
        """The pick, then up to `epp.fallbacks` other healthy backends (its subset's)."""
        n = self.config.epp.fallbacks
        out = [protocol.endpoint_of(backend)]
        if n:
            for b in self.fleet.stats(self._clock()):
                if len(out) > n:
                    break
                if (b.url != backend and b.active and b.healthy and b.up
                        and (allowed is None or b.url in allowed)):  # fmt: skip
                    out.append(protocol.endpoint_of(b.url))
        return out

    def _shed(self, ex: _Exchange, effect: Reject) -> pb.ProcessingResponse:
        """429 with Retry-After in OpenAI's shape; 503 when no backend is healthy."""
        retry = retry_after_header(effect.retry_after_s / self._speedup)
        ex.outcome, ex.reason = Outcome.REJECTED, effect.reason
        ex.status = 503 if effect.reason is Reason.NO_BACKEND else 429
        self.metrics.shed(ex.cls, int(retry))
        self._close(ex)
        msg = f"{SHED_MESSAGES[effect.reason].format(cls=ex.cls)}; retry after {retry} s"
        err_type = "upstream_error" if ex.status == 503 else "rate_limit_exceeded"
        return _error(ex.status, msg, err_type, effect.reason,
                      (("retry-after", retry), ("x-request-id", ex.rid)))  # fmt: skip

    # -- the answer on its way back ---------------------------------------------------

    def _response_headers(self, st: _Stream, msg: pb.ProcessingRequest) -> pb.ProcessingResponse:
        ex = st.ex
        if ex is None:
            return protocol.headers_answer("response_headers")
        headers = protocol.header_map(msg.response_headers.headers)
        try:
            ex.status = int(headers.get(":status", "0"))
        except ValueError:
            ex.status = 0
        ex.served = protocol.served_endpoint(msg.metadata_context, headers)
        if ex.status == 200 and ex.stream:
            ex.relay = SseRelay(ex.route.endswith("chat/completions"),
                                strip_usage=not ex.include_usage, keep_text=False)  # fmt: skip
        if msg.response_headers.end_of_stream:
            self._answered(st)
        st.answering = True
        return protocol.headers_answer(
            "response_headers", (("x-request-id", ex.rid), ("x-burstguard-class", ex.cls))
        )

    def _response_body(self, st: _Stream, body: pb.HttpBody) -> list[pb.ProcessingResponse]:
        """Echoes a piece of the answer at once, reading it on the way (STREAMED: one
        answer per piece, the piece replaced only where the relay edited it)."""
        data, end = body.body, body.end_of_stream
        ex = st.ex
        if ex is not None and ex.outcome is None:
            if ex.relay is not None:
                data = ex.relay.feed(data)
                if end:
                    data += ex.relay.flush()
                if ex.ttft_s is None and ex.relay.content_seen:
                    ex.ttft_s = self._clock() - ex.arrival
                    self.metrics.ttft_of(ex.cls).observe(ex.ttft_s)
                    self.event(FirstToken(ex.rid))
            elif ex.answer_bytes + len(data) <= _MAX_ANSWER_BYTES:
                ex.answer.append(data)
                ex.answer_bytes += len(data)
            if end:
                self._answered(st)
        if not st.duplex:
            return [protocol.body_answer("response_body", None if data == body.body else data)]
        if not data and not end:
            return []  # an edited stream's partial event: it goes with the read that ends it
        return list(protocol.streamed_body("response_body", data, end))

    # -- preemption: the answer ended with a retryable error --------------------------

    def _preempted(self, st: _Stream) -> None:
        """The core preempted it and will not resume it (it counted it failed): its
        client's answer ends with a retryable error, which makes Envoy close the upstream
        (the engine frees the slot). Counted and logged here; the cut is written at once."""
        ex = st.ex
        if ex is None or ex.outcome is not None or st.cut:
            return
        st.cut = True
        if ex.relay is not None:
            ex.output_tokens = ex.relay.tokens()
        ex.outcome, ex.reason = Outcome.FAILED, Reason.PREEMPTED
        self.metrics.preemptions_of(ex.cls).inc()
        self._close(ex, preempted=True)
        task = asyncio.get_running_loop().create_task(self._cut(st))
        self._cuts.add(task)
        task.add_done_callback(self._cuts.discard)

    async def _cut(self, st: _Stream) -> None:
        """Writes the answer that ends a preempted request: its stream's last event, an
        OpenAI error (FULL_DUPLEX_STREAMED, once its body has begun), else an immediate
        503 with Retry-After (Envoy sends it in place of the engine's answer, or resets
        the client's stream where that has begun)."""
        ex = st.ex
        assert ex is not None
        retry = retry_after_header(self.config.admission.min_retry_after_s / self._speedup)
        message = (f"preempted by a request of a higher-priority class; not resumed behind "
                   f"the Endpoint Picker; retry after {retry} s")  # fmt: skip
        if st.answering and st.duplex and ex.relay is not None:
            err = {"message": message, "type": "service_unavailable", "param": None,
                   "code": Reason.PREEMPTED.value}  # fmt: skip
            event = b"data: " + json_bytes({"error": err}) + b"\n\n"
            answers = list(protocol.streamed_body("response_body", event, True))
        else:
            answers = [_error(503, message, "service_unavailable", Reason.PREEMPTED,
                              (("retry-after", retry), ("x-request-id", ex.rid)))]  # fmt: skip
        async with st.writing:
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, RuntimeError):
                for answer in answers:
                    await st.context.write(answer)

    def _answered(self, st: _Stream) -> None:
        """The answer ended: its one outcome, told to the core."""
        ex = st.ex
        if ex is None or ex.outcome is not None:
            return
        if ex.status == 200:
            if ex.relay is not None:
                ex.output_tokens = ex.relay.tokens()
                done = ex.relay.finished()
            else:
                tokens = json_tokens(b"".join(ex.answer))
                done = tokens is not None
                ex.output_tokens = tokens or 0
            if done:
                self._finished(ex, ex.output_tokens)
            else:  # cut short, or no OpenAI answer: the backend's fault
                kind = "backend_cut_stream" if ex.relay is not None else "bad_answer"
                self._failed(ex, "reset" if ex.relay is not None else "bad_answer", kind)
        elif ex.status >= 500 or ex.status == 0:
            self._failed(ex, "status_5xx", f"http_{ex.status}")
        else:
            self.metrics.errors.labels(f"http_{ex.status}").inc()
            ex.outcome, ex.reason = Outcome.FAILED, f"backend_{ex.status}"
            self.event(Fail(ex.rid))
        self._close(ex)

    def _failed(self, ex: _Exchange, reason: str, kind: str) -> None:
        """The backend failed it; Envoy already answered the client. `started`: the core
        may not send it elsewhere (it cannot: the picker holds no request)."""
        self.metrics.errors.labels(kind).inc()
        ex.outcome, ex.reason = Outcome.FAILED, kind
        self.event(BackendFailed(ex.rid, reason, started=True))

    def _close(self, ex: _Exchange, preempted: bool = False) -> None:
        """Counts the outcome once and writes the request's log line."""
        outcome = ex.outcome or Outcome.FAILED
        self.metrics.ended(ex.cls, outcome, ex.reason)
        self._log_line(ex, outcome, endpoints=ex.endpoints, served=ex.served,
                       preemptions=int(preempted))  # fmt: skip

    # -- HTTP: /metrics, /health, /ready ------------------------------------------------

    async def _http(self, req: HttpRequest, resp: Responder) -> None:
        if req.path == "/metrics":
            try:  # the gateway's rule: `metrics.api_key` where one is set
                check_bearer(req.headers.get("authorization"), self.config.metrics.api_key)
            except AuthError as exc:
                resp_headers = (("www-authenticate", "Bearer"),)
                send_error(resp, 401, str(exc), "authentication_error", "invalid_api_key",
                           resp_headers)  # fmt: skip
                return
            resp.send(200, self.metrics.render(), [("content-type", CONTENT_TYPE)])
        elif req.path == "/health":
            resp.send(200, b'{"status":"ok"}', [("content-type", "application/json")])
        elif req.path == "/ready":
            self._send_ready(resp)
        else:
            self._refuse(resp, 404, f"no route {req.path[:200]}", "not_found")

    def _refuse(self, resp: Responder, status: int, message: str, code: str) -> None:
        send_error(resp, status, message, "invalid_request_error", code)


class _Servicer(pb_grpc.ExternalProcessorServicer):
    """ext_proc's one method, served by the picker."""

    def __init__(self, picker: EndpointPicker) -> None:
        self._picker = picker

    async def Process(self, request_iterator: Any, context: Any) -> None:
        await self._picker.process(context)


def health_pb2_grpc_add(servicer: health_aio.HealthServicer, server: grpc.aio.Server) -> None:
    """Registers the gRPC health service (`liveness`, `readiness`, the ext_proc name)."""
    from grpc_health.v1 import health_pb2_grpc

    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)


def _error(
    status: int, message: str, err_type: str, code: str,
    headers: tuple[tuple[str, str], ...] = (),
) -> pb.ProcessingResponse:  # fmt: skip
    """An immediate answer in OpenAI's error shape."""
    body = json_bytes({"error": {"message": message, "type": err_type, "param": None,
                                 "code": code}})  # fmt: skip
    return protocol.immediate(status, body, (("content-type", "application/json"), *headers),
                              details=code)  # fmt: skip
