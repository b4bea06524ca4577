"""The gateway's live shell: a reverse proxy that drives GatewayCore with the real clock.

Per generation request: authenticate (401), take the body the server read under the size
limit (413), validate the fields admission needs (400), pick class and tenant, hand the
core an `Arrive` event and wait for its answer: a `Reject` is a 429 with Retry-After, a
`Release` sends the body upstream on a pooled keep-alive connection and passes the answer
back: a stream chunk by chunk as the backend writes it (each backend read becomes one
client write, in the same callback; `live.gateway.relay` counts its tokens from usage and keeps
the text of a preemptible stream), a JSON answer whole. The HTTP layers are the gateway's
own (`gateway.http`, `gateway.upstream`): a proxied token is the hot path, and ASGI
layers cost more than the relay itself.

This shell decides nothing (`core.gateway.events` is the whole protocol, the simulator speaks it
too): every event that can free or need room (an arrival, a first token, a finish, a
cancel, a failure, a scrape, the 50 ms tick) goes to `core.handle` synchronously, and its
effects are carried out at once — a released or shed request's waiting handler is woken
through its future, a preempted one has its upstream connection closed and waits for the
core to release it again, then continues its client's stream (`relay.resume_body`). No
task hop sits between an arrival and its release, so an idle gateway adds no queueing
delay. The core's clock is engine seconds: wall time x `engine_speedup`.

Fleet: every `Release` names the backend the core's router picked; each backend has its
own upstream pool, its /metrics scraper and /health prober (`FleetMonitor`, fed by
discovery: the static list, a DNS name, a watched file). A backend that fails a request
(connection refused or reset, 5xx, timeout) is reported to the core (`BackendFailed`,
with whether the client already holds tokens): it answers with a `Release` to another
backend — the client sees nothing, or, after its first token, the stream continues with
the preemption's resume (`relay.resume_body`) —, or with `Abandon` (the error goes to
the client: a status before the answer started, one in-band error event after). With
`fleet.redis`, each send first takes a shared lease on its backend (`SharedState`), so
N gateway replicas together respect the backend's cap; a refused lease is a
`LeaseRefused` (queued again). `/ready` is 200 while >= 1 backend is healthy; the log
line names the backends a request went to; per-backend metrics come from
`FleetCollector`.

A client that hangs up cancels its handler (the server sees the connection close): a
queued request leaves the queue (`Cancel`), an in-flight one has its upstream connection
closed, which makes vLLM (and the emulator) abort it and free its KV. Every admitted
request ends in exactly one outcome (completed, rejected, cancelled, failed), counted once
in `llm_request_total` and written as one JSON log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp

from burstguard.core.gateway.api import (
    BadRequest,
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
    openapi_schema,
)
from burstguard.core.gateway.auth import AuthError, check_bearer
from burstguard.core.gateway.config import AutoscalerConfig, GatewayConfig
from burstguard.core.gateway.core import PROGRESS_S, TICK_S
from burstguard.core.gateway.events import (
    Abandon,
    Abort,
    Arrive,
    BackendFailed,
    Cancel,
    Circuit,
    Drain,
    Effect,
    Event,
    Fail,
    Finish,
    FirstToken,
    FleetService,
    Forget,
    LeaseRefused,
    Preempt,
    Reject,
    Release,
    Settle,
    Tick,
)
from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.quota import Verdict
from burstguard.core.gateway.request import GatewayRequest
from burstguard.core.scaling.signals import gateway_signals
from burstguard.errors import ConfigError
from burstguard.http.client import UPSTREAM_IDLE_S, Call, UpstreamError, UpstreamPool
from burstguard.http.server import HttpRequest, HttpServer, Responder
from burstguard.live.gateway.errors import (
    JSON_HEADER,
    SHUTDOWN_ERROR,
    failure_of,
    json_bytes,
    ratelimit_headers,
    send_error,
    send_json,
    send_quota,
    send_shed,
    upstream_error,
)
from burstguard.live.gateway.fleet_metrics import FleetCollector
from burstguard.live.gateway.metrics import (
    CONTENT_TYPE,
    GaugeSnapshot,
    core_snapshot,
)
from burstguard.live.gateway.relay import SseRelay, json_tokens, resume_body, upstream_body
from burstguard.live.gateway.shared_state import SharedState
from burstguard.live.gateway.shell import CoreShell, Exchange
from burstguard.live.scaling.scaler import LiveScaler, ScalingCollector
from burstguard.wire.outcomes import Outcome, Reason

log = logging.getLogger("burstguard.core.gateway")

_PROGRESS_TICKS = max(1, round(PROGRESS_S / TICK_S))  # ticks between progress reports
_KEYED_ROUTES = frozenset(("/v1/chat/completions", "/v1/completions", "/v1/models"))


@dataclass(slots=True)
class _Exchange(Exchange):
    """One request's story through the proxy: what `Exchange` says, and its calls."""

    own_s: float = 0.0  # the gateway's own time before the upstream write, queue wait excluded
    call: Call | None = None  # the upstream request under way
    preempted: bool = False  # the core preempted it: its call is closed, it waits again
    preemptions: int = 0
    backends: list[str] = field(default_factory=list)  # where it was sent, in order
    lease: str | None = None  # the backend whose shared (Redis) slot it holds
    resumed_on_failover: int = 0  # its stream went on elsewhere after its backend failed
    failure: tuple[int, dict[str, Any]] | None = None  # the last backend failure's answer
    quota: Verdict | None = None  # its quota's buckets after admission (x-ratelimit-*)
    fed: bool = False  # its backend sent something since the last progress report
    resp: Responder | None = None  # its client's answer (paused: not the backend's silence)


class Gateway(CoreShell):
    """The gateway process: core, backend pool and monitor, metrics and routes."""

    def __init__(self, config: GatewayConfig) -> None:
        super().__init__(config, self._snapshot)
        self.shared = SharedState(config.fleet.redis) if config.fleet.redis.url else None
        self.metrics.registry.register(
            FleetCollector(self.fleet, self._clock, self.shared, self.names)
        )
        self.scaler = self._scaler(config.autoscaler)
        self._running: dict[str, _Exchange] = {}
        self._session: aiohttp.ClientSession | None = None
        self._pools: dict[str, UpstreamPool] = {}
        self._syncer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._arrivals = 0
        self._openapi = json_bytes(openapi_schema())
        self._routes: dict[str, tuple[str, Route]] = {
            "/v1/chat/completions": ("POST", self._generation(ChatCompletionRequest)),
            "/v1/completions": ("POST", self._generation(CompletionRequest)),
            "/v1/models": ("GET", self.models),
            "/health": ("GET", self.health),
            "/ready": ("GET", self.ready),
            "/metrics": ("GET", self.metrics_endpoint),
            "/openapi.json": ("GET", self.openapi),
        }
        # `metrics.listen`: /metrics moves to its own listener (with the probes' routes)
        self._metrics_routes = {p: self._routes[p] for p in ("/metrics", "/health", "/ready")}
        if config.metrics.listen is not None:
            del self._routes["/metrics"]

    # -- lifecycle ------------------------------------------------------------------

    async def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Serves until SIGINT/SIGTERM (the CLI's event loop runs this)."""
        server = HttpServer(self.handle, self._refuse,
                            max_body_bytes=self.config.max_body_bytes,
                            limits=self.config.limits, check_head=self._check_head,
                            on_limit=self.metrics.limit_tripped,
                            flush_interval_s=self.config.stream_flush_ms / 1e3)  # fmt: skip
        side: tuple[HttpServer, asyncio.Server] | None = None
        try:
            await self.start()
            side = await self._metrics_listener()
        except BaseException:
            await self.stop()
            raise
        # Long-lived objects (config, schemas, metric families) leave the collector's view,
        # and young collections run less often: the relay allocates per chunk (gc was ~8%
        # of the gateway's CPU at 256 streams).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        try:
            await server.serve(self.config.listen.host, self.config.listen.port, on_ready,
                               drain_s=self.config.drain_s, on_stop=self._draining,
                               on_deadline=self._drained)  # fmt: skip
        finally:
            if side is not None:
                side[0].close(side[1])
            await self.stop()

    async def _metrics_listener(self) -> tuple[HttpServer, asyncio.Server] | None:
        """`metrics.listen`'s server: /metrics, /health, /ready (None: not configured)."""
        at = self.config.metrics.listen
        if at is None:
            return None
        server = HttpServer(partial(self.handle, routes=self._metrics_routes), self._refuse,
                            max_body_bytes=1024, limits=self.config.limits)  # fmt: skip
        try:
            return server, await server.listen(at.host, at.port)
        except OSError as exc:
            where = f"{at.host}:{at.port}"
            raise ConfigError(f"metrics.listen: cannot listen on {where}: {exc}") from exc

    def _draining(self, drain_s: float) -> None:
        """SIGTERM: the core answers what cannot finish in the drain (503 shutdown)."""
        log.warning("stopping: draining for %g s", drain_s)
        self.event(Drain(self._now() + drain_s * self._speedup))

    def _drained(self) -> None:
        """The drain's end: what is still in flight is cut, streams with an error event."""
        self.event(Drain(self._now()))

    async def start(self) -> None:
        """Discovery, scrapers and probes, Redis; a source that fails at start (an
        unresolvable name, an unreadable file, a required Redis) is a ConfigError naming
        its field."""
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_IDLE_S)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",)
        )
        await self._start_monitor(self._session)
        loop = asyncio.get_running_loop()
        if self.shared is not None:
            await self.shared.connect()  # unreachable: degraded (a warning), or required
            self._syncer = loop.create_task(self._sync())
        self._ticker = loop.create_task(self._tick())
        if self.scaler is not None:
            self._spawn(self.scaler.run())

    def _scaler(self, cfg: AutoscalerConfig | None) -> LiveScaler | None:
        """The autoscaler policy on the core's clock and its signals; its decision and
        figures on /metrics."""
        if cfg is None:
            return None
        ctl = cfg.scaling_policy().build_controller(
            initial_replicas=cfg.initial_replicas, start=self._now()
        )
        self.metrics.registry.register(ScalingCollector(ctl))

        def signals() -> dict[str, float]:
            return gateway_signals(self.core.stats, self._arrivals, self.metrics.work,
                                   self.core.backend_states.values())  # fmt: skip

        return LiveScaler(ctl, self._now, signals, speedup=self._speedup)

    async def stop(self) -> None:
        for task in (self._ticker, self._syncer, *self._background):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.monitor is not None:
            await self.monitor.stop()
        if self.shared is not None:
            await self.shared.close()
        if self._session is not None:
            await self._session.close()
        for pool in self._pools.values():
            pool.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the gateway is not started")
        return self._session

    def pool(self, backend: str) -> UpstreamPool:
        """`backend`'s keep-alive pool (made on first use, with its config's timeouts)."""
        pool = self._pools.get(backend)
        if pool is None:
            b = self.core.backend_options(backend)
            pool = self._pools[backend] = UpstreamPool(
                backend, b.connect_timeout_s, b.read_timeout_s
            )
        return pool

    def backend_name(self, url: str) -> str:
        """What logs and metrics call backend `url` (`core.fleet.names`)."""
        return self.names(url)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- the driver: events to the core, its effects carried out -------------------

    def event(self, event: Event) -> None:
        """Hands `event` to the core and carries out every effect it returns. A request
        leaving its backend gives its shared slot back first, so a request the core
        releases into that slot in the same answer finds it free."""
        if self.shared is not None and isinstance(event, (Finish, Fail, Cancel, BackendFailed)):
            self._drop_lease(self._running.get(event.request_id))
        super().event(event)

    def _drop_lease(self, ex: _Exchange | None) -> None:
        if ex is not None and ex.lease is not None and self.shared is not None:
            self.shared.release_soon(ex.lease, ex.rid)
            ex.lease = None

    def _carry_out(self, effect: Effect) -> None:
        if isinstance(effect, Settle):  # the request's quota, charged in Redis, settled
            if self.shared is not None:
                self.shared.settle_quota_soon(effect.amounts, self._speedup)
            return
        if isinstance(effect, Forget):  # a drained backend left the fleet
            if self.monitor is not None:
                self.monitor.forget(effect.backend)
            pool = self._pools.pop(effect.backend, None)
            if pool is not None:
                pool.close()
            return
        if isinstance(effect, Circuit):  # one line per change, for whoever is on call
            log.warning("backend %s: circuit %s", self.backend_name(effect.backend), effect.state)
            return
        rid = effect.req.id
        if isinstance(effect, Abort):  # past its deadline, or its circuit opened
            ex = self._running.get(rid)
            if ex is not None:
                self._drop_lease(ex)
                failure = effect.failure
                if failure is None:  # the drain ended
                    ex.failure = (503, SHUTDOWN_ERROR)
                else:
                    ex.failure = (failure.status, failure.error())
                    self.metrics.errors.labels(failure.code).inc()
                ex.preempted = True  # its call ends; the core's next effect says what follows
                if ex.call is not None:
                    ex.call.abort()
            return
        if isinstance(effect, Preempt):
            ex = self._running.get(rid)
            if ex is not None:
                self._drop_lease(ex)
                ex.preempted = True
                ex.preemptions += 1
                self.metrics.preemptions_of(ex.cls).inc()
                if ex.call is not None:
                    ex.call.abort()  # the engine aborts it and frees its KV
            return
        self._wake(rid, effect)

    async def _sync(self) -> None:
        """Every `sync_interval_s`: renew this gateway's leases, publish its queue depth and
        arrival rate (what an autoscaler reads), flush tenant usage and hand the core what
        the other replicas served the tenants its fairness tracks."""
        assert self.shared is not None
        interval = self.config.fleet.redis.sync_interval_s
        seen = self._arrivals
        while True:
            await asyncio.sleep(interval)
            rate = (self._arrivals - seen) / interval
            seen = self._arrivals
            depth = sum(self.core.stats.queue_depth.values())
            try:
                tenants = self.core.fairness_tenants()
                result = await self.shared.sync(depth, rate, self.fleet.backends, tenants)
                if result.fleet_service:
                    self.event(FleetService(result.fleet_service))
            except Exception:  # the syncer must never die
                log.exception("shared state sync failed")

    def _progressed(self) -> list[str]:
        """Requests whose backend sent something since the last report, or whose client
        holds its stream paused (then the backend's silence is the client's doing)."""
        out: list[str] = []
        for rid, ex in self._running.items():
            if ex.fed or (ex.resp is not None and ex.resp.paused):
                ex.fed = False
                out.append(rid)
        return out

    def _tick_event(self, ticks: int) -> Tick:
        """Every PROGRESS_S, the tick says which requests progressed (stall deadlines)."""
        return Tick(self._progressed() if ticks % _PROGRESS_TICKS == 0 else ())

    # -- routing --------------------------------------------------------------------

    async def handle(
        self, req: HttpRequest, resp: Responder, routes: dict[str, tuple[str, Route]] | None = None
    ) -> None:
        """Every request the server parsed: route it (by `routes`, default the main
        listener's), or 404 / 405."""
        route = (self._routes if routes is None else routes).get(req.path)
        if route is None:
            self._refuse(resp, 404, f"no route {req.path[:200]}", "not_found")
        elif req.method != route[0]:
            self._refuse(resp, 405, f"method {req.method} not allowed", "method_not_allowed")
        else:
            await route[1](req, resp)

    def _check_head(self, req: HttpRequest) -> tuple[int, str, str] | None:
        """Refuses from the head alone, before `100 Continue` invites the body: a 401 on a
        route that needs a key."""
        if req.path not in _KEYED_ROUTES:
            return None
        try:
            self.auth.authenticate(req.headers.get("authorization"), req.headers.get("x-api-key"))
        except AuthError as exc:
            return 401, str(exc), "invalid_api_key"
        return None

    def _generation(self, model: type[GenerationRequest]) -> Route:
        async def endpoint(req: HttpRequest, resp: Responder) -> None:
            await self.generate(req, resp, model)

        return endpoint

    # -- generation -----------------------------------------------------------------

    async def generate(
        self, req: HttpRequest, resp: Responder, model: type[GenerationRequest]
    ) -> None:
        arrival = req.received
        try:
            a = self._admit(model, req.body, req.headers)
        except AuthError as exc:
            return self._refuse(resp, 401, str(exc), "invalid_api_key")
        except BadRequest as exc:
            return self._refuse(resp, 400, str(exc), "invalid_request")
        gen = a.gen
        # a stream of token ids (or of several prompts) cannot be continued with text
        prompts = gen.prompts() if isinstance(gen, CompletionRequest) else [""]
        resumable = not gen.stream or (len(prompts) == 1 and isinstance(prompts[0], str))
        gr = self._arrival(a, req.path, arrival, req.headers, resumable, stream=gen.stream,
                           key_id=a.ident.key_id if a.ident is not None else None)  # fmt: skip
        rid = gr.id
        ex = _Exchange(rid, a.cls, a.tenant, req.path, gen.stream, arrival, a.prompt_tokens)
        ex.resp = resp
        self._arrivals += 1
        arrive = await self._charge_quota(gr)
        ex.own_s = self._clock() - arrival  # read to the core; the rest is added at release
        fut = self._expect(rid)
        self.event(arrive)
        try:
            await self._serve(req, resp, ex, fut, gen, a.data)
        except asyncio.CancelledError:
            if not resp.gone:
                self._end_unexpected(ex)
                raise
            if ex.outcome is None:  # the client hung up, or was cut for not reading
                ex.outcome = Outcome.CANCELLED
                ex.reason = Reason.CLIENT_STALLED if resp.stalled else None
                self._waiting.pop(rid, None)
                self.event(Cancel(rid, self._received(ex)))
        except Exception:
            log.exception("request %s failed in the gateway", rid)
            self._end_unexpected(ex)
            if not resp.committed:
                ex.status = 500
                send_error(resp, 500, "internal gateway error", "internal_error")
        finally:
            self._running.pop(rid, None)
        self._close(ex)

    async def _charge_quota(self, gr: GatewayRequest) -> Arrive:
        """The request's arrival; with fleet.redis, its quota charged in Redis first (the
        core's plan, the core's verdict to take), or, Redis unreachable, left to the core
        at quota / replicas."""
        if self.shared is None:
            return Arrive(gr)
        plan = self.core.quota_plan(gr)
        if plan is None:
            return Arrive(gr)
        try:
            verdict = await self.shared.charge_quota(plan, self._speedup)
        except asyncio.CancelledError:  # its client left: whatever was charged goes back
            self.shared.settle_quota_soon([(c, c.cost) for c in plan.charges], self._speedup)
            raise
        if verdict is None:
            return Arrive(gr, quota_share=self.config.fleet.redis.replicas)
        return Arrive(gr, quota=verdict)

    @staticmethod
    def _received(ex: _Exchange) -> int | None:
        """Output tokens its client holds (a stream's, counted so far; None: unknown)."""
        if ex.output_tokens:
            return ex.output_tokens
        if ex.relay is not None and ex.stream:
            return ex.relay.received()
        return None if ex.backends else 0

    def _end_unexpected(self, ex: _Exchange) -> None:
        if ex.outcome is None:
            ex.outcome = Outcome.FAILED
            self._waiting.pop(ex.rid, None)
            self.event(Fail(ex.rid, self._received(ex)))

    async def _serve(
        self, req: HttpRequest, resp: Responder, ex: _Exchange,
        fut: asyncio.Future[Effect], gen: GenerationRequest, data: dict[str, Any],
    ) -> None:  # fmt: skip
        """Waits for the core's answer; serves the request (`data`: its body, parsed) on
        the backend it names, again after each preemption, failover or refused lease."""
        chat = ex.route.endswith("chat/completions")
        opts = gen.stream_options
        relay: SseRelay | None = None  # made at the first release, for its backend
        while True:
            effect = await fut
            if isinstance(effect, Reject):
                ex.outcome, ex.reason = Outcome.REJECTED, effect.reason
                ex.status = 503 if effect.reason == Reason.SHUTDOWN else 429
                if effect.reason == Reason.QUOTA and effect.quota is not None:
                    wait = send_quota(resp, ex.tenant, effect.quota, self._speedup, ex.rid)
                    if math.isfinite(wait):
                        self.metrics.shed(ex.cls, max(1, math.ceil(wait)))
                    return
                extra = ratelimit_headers(effect.quota, self._speedup)
                told = send_shed(resp, ex.cls, effect.reason, effect.retry_after_s / self._speedup,
                                 ex.rid, extra)  # fmt: skip
                self.metrics.shed(ex.cls, told)
                return
            if isinstance(effect, Abandon):
                self._abandoned(resp, ex, effect.outcome)
                return
            assert isinstance(effect, Release)
            backend = effect.backend
            if effect.quota is not None:
                ex.quota = effect.quota
            if relay is None:  # a stream keeps its text where its backend can resume it
                keep = ex.stream and self.core.backend_options(backend).resume
                relay = SseRelay(chat, strip_usage=not (opts is not None and opts.include_usage),
                                 keep_text=keep)  # fmt: skip
                ex.relay = relay
            released = self._released(ex)
            # the core's next answer about it (a preemption's or failover's Release, Abandon)
            fut = self._expect(ex.rid)
            self._running[ex.rid] = ex
            ex.preempted = False
            if self.shared is not None:
                if not await self._lease(backend, ex.rid):
                    self.event(LeaseRefused(ex.rid))  # others hold its cap: queued again
                    continue
                ex.lease = backend
            body = upstream_body(data, ex.stream, effect.priority)
            if effect.resumed and ex.ttft_s is not None:  # continue the stream its client has
                relay.resume()
                if relay.text:
                    body = resume_body(body, chat, "".join(relay.text), relay.base_tokens)
                self.metrics.reprefill_tokens.inc(ex.prompt_tokens + relay.base_tokens)
            elif effect.resumed:  # nothing sent yet (or not a stream): start over
                self.metrics.reprefill_tokens.inc(ex.prompt_tokens)
            ex.backends.append(backend)
            ex.resumed_on_failover += effect.failover and ex.ttft_s is not None
            try:
                await self._call(req, resp, ex, json_bytes(body), relay, released, backend)
            finally:
                self._drop_lease(ex)
            if ex.outcome is not None:
                self._waiting.pop(ex.rid, None)
                return

    async def _lease(self, backend: str, rid: str) -> bool:
        """A shared in-flight slot on `backend`; a client gone meanwhile gives it back."""
        assert self.shared is not None
        try:
            return await self.shared.acquire(backend, rid, self.core.backend_cap(backend))
        except asyncio.CancelledError:
            self.shared.release_soon(backend, rid)
            raise

    async def _call(
        self, req: HttpRequest, resp: Responder, ex: _Exchange, body: bytes,
        relay: SseRelay, released: float, backend: str,
    ) -> None:  # fmt: skip
        """One upstream request; returns with ex.outcome set, or with ex.preempted, or
        after reporting its backend's failure (the core's answer comes to the future)."""
        headers = {"content-type": "application/json", "accept-encoding": "identity",
                   "x-request-id": ex.rid}  # fmt: skip
        if not self.auth.enabled and (auth := req.headers.get("authorization")):
            headers["authorization"] = auth
        call: Call | None = None
        try:
            call = await self.pool(backend).start("POST", ex.route, body, headers)
            ex.call = call
            if ex.preempted:  # preempted while connecting
                return
            if not ex.preemptions and len(ex.backends) == 1:
                ex.own_s += call.sent_at - released
            if ex.stream:
                self._arm_relay(resp, ex, call, relay)
            status = await call.response()
            if status != 200:
                raw = await call.read()
                code, payload = upstream_error(status, raw)
                self.metrics.errors.labels(f"http_{status}").inc()
                if status >= 500:  # the backend's fault: another may serve it
                    self._backend_failed(ex, Failure.STATUS_5XX, code, payload)
                    return
                ex.outcome, ex.reason = Outcome.FAILED, f"backend_{status}"
                self.metrics.refused_work(ex.cls, ex.prompt_tokens)
                self.event(Fail(ex.rid, self._received(ex)))
                if resp.committed:  # a resumed stream the backend refused: end it in-band
                    resp.end(b"data: " + json_bytes(payload) + b"\n\n")
                else:
                    ex.status = code
                    send_json(resp, code, payload)
            elif ex.stream:
                await self._finish_relay(resp, ex, call, relay)
            else:
                await self._pass_json(resp, ex, call)
        except asyncio.CancelledError:
            if ex.preempted and not resp.gone:
                return  # its call was aborted by the preemption: it waits to resume
            raise
        except UpstreamError as exc:
            if ex.preempted:
                return
            failure = failure_of(exc, self.backend_name(backend))
            self.metrics.errors.labels(failure.code).inc()
            self._backend_failed(ex, failure, failure.status, failure.error())
        finally:
            ex.call = None
            if call is not None:
                call.abort()  # a no-op once the answer ended; else the engine frees the KV

    def _backend_failed(
        self, ex: _Exchange, failure: Failure, status: int, payload: dict[str, Any]
    ) -> None:
        """Tells the core; its answer (failover, queued again, Abandon) comes to the
        request's future. `started`: the client holds tokens (only a resume can go on)."""
        ex.failure = (status, payload)
        self.event(BackendFailed(ex.rid, failure.reason, started=ex.ttft_s is not None))

    def _abandoned(self, resp: Responder, ex: _Exchange, outcome: str) -> None:
        """Its backend failed it and the core gave up (`outcome`): the last failure goes to
        the client — as the status, or as one in-band error event once the stream began."""
        status, payload = ex.failure or (502, {"error": {
            "message": "backend failed", "type": "upstream_error", "param": None,
            "code": "backend_error"}})  # fmt: skip
        extra: tuple[tuple[str, str], ...] = ()
        if outcome == Reason.SHUTDOWN:  # this replica stops: its own reason, not a backend's
            status, payload = 503, SHUTDOWN_ERROR
            ex.outcome, ex.reason = Outcome.FAILED, Reason.SHUTDOWN
            extra = (("retry-after", "1"),)
        else:  # the documented form: the error code plus the fleet's outcome, always
            ex.outcome = Outcome.FAILED
            ex.reason = f"{payload['error'].get('code')}+{outcome}"
        if resp.committed:
            resp.end(b"data: " + json_bytes(payload) + b"\n\n")
        else:
            ex.status = status
            send_json(resp, status, payload, extra)

    def _arm_relay(self, resp: Responder, ex: _Exchange, call: Call, relay: SseRelay) -> None:
        """Sets the SSE pass-through to start when the backend answers 200: the stream's
        head and first bytes then go to the client from the very read that brought them,
        each later read as one chunk; the handler's task is not on the first-token path.
        A resumed answer continues the stream its client already has."""

        def sink(data: bytes) -> None:
            """Until the client holds a token: its first bytes are timed, nothing is held."""
            hold = relay.content_seen  # until a token is out, nothing waits for the flush
            ex.fed = True
            out = relay.feed(data)
            if out:
                resp.write_soon(out, hold)  # later ones at most every flush interval
                if ex.ttft_s is None:
                    now = self._clock()
                    ex.ttft_s = now - ex.arrival
                    self.event(FirstToken(ex.rid))
                    self.metrics.ttft_of(ex.cls).observe(ex.ttft_s)
                    self.metrics.own_time.observe(ex.own_s + now - call.head_at)
            if resp.paused:
                call.pause(True)
            if relay.content_seen and ex.ttft_s is not None:
                call.stream_to(tokens)  # the rest of this answer: the lean path

        def tokens(data: bytes) -> None:
            """Every later read (most of them): relayed, at most once per flush interval."""
            ex.fed = True
            out = relay.feed(data)
            if out:
                resp.write_soon(out)
            if resp.paused:
                call.pause(True)

        def on_head(status: int) -> None:
            if status != 200:
                return  # read whole and mapped to an error by the handler
            if not resp.started:
                ex.status = 200
                resp.start_stream(200, [
                    ("content-type", call.content_type or "text/event-stream"),
                    ("cache-control", "no-cache"), ("x-request-id", ex.rid),
                    ("x-burstguard-class", ex.cls),
                    *ratelimit_headers(ex.quota, self._speedup),
                ])  # fmt: skip
            resp.on_writable = lambda: call.pause(False)
            call.stream_to(sink)

        call.on_head = on_head

    async def _finish_relay(
        self, resp: Responder, ex: _Exchange, call: Call, relay: SseRelay
    ) -> None:
        """Waits for the relayed stream's end, then counts its outcome and ends it."""
        await call.finished()
        ex.output_tokens = relay.tokens()
        if relay.finished():
            self._finished(ex, ex.output_tokens)
        else:  # the backend ended it early (it died, or llama-cpp-python's cut)
            cut = Failure.CUT_STREAM
            self.metrics.errors.labels(cut.code).inc()
            self._backend_failed(ex, cut, cut.status, cut.error())
            return
        resp.end()

    async def _pass_json(self, resp: Responder, ex: _Exchange, call: Call) -> None:
        raw = await call.read()
        tokens = json_tokens(raw)
        if tokens is None:  # a 200 that is no OpenAI answer: another backend may serve it
            bad = Failure.NOT_JSON
            self.metrics.errors.labels(bad.code).inc()
            self._backend_failed(ex, bad, bad.status, bad.error())
            return
        ex.status = 200
        self._finished(ex, tokens)
        resp.send(200, raw, [
            ("content-type", call.content_type or "application/json"),
            ("x-request-id", ex.rid), ("x-burstguard-class", ex.cls),
            *ratelimit_headers(ex.quota, self._speedup),
        ])  # fmt: skip

    def _refuse(self, resp: Responder, status: int, message: str, code: str) -> None:
        self.metrics.invalid.labels(str(status)).inc()
        err_type = "authentication_error" if status == 401 else "invalid_request_error"
        headers = (("www-authenticate", "Bearer"),) if status == 401 else ()
        send_error(resp, status, message, err_type, code, headers)

    def _close(self, ex: _Exchange) -> None:
        """Counts the outcome once and writes the request's log line. A stream that did
        not complete (failed, cut, cancelled) is counted with what its client received."""
        outcome = ex.outcome or Outcome.FAILED
        if outcome is not Outcome.COMPLETED and ex.stream and ex.relay is not None:
            ex.output_tokens = ex.relay.received()
            if ex.output_tokens:
                self.metrics.output_tokens_of(ex.cls).inc(ex.output_tokens)
        self.metrics.ended(ex.cls, outcome, ex.reason)
        if self.shared is not None and ex.backends:  # the tenant's service, for all replicas
            self.shared.charge_tenant(ex.cls, ex.tenant, ex.prompt_tokens + ex.output_tokens)
        self._log_line(ex, outcome, preemptions=ex.preemptions,
                       backends=self.names.all(ex.backends),
                       failover_resumes=ex.resumed_on_failover)  # fmt: skip

    # -- other routes ---------------------------------------------------------------

    def _a_backend(self) -> str | None:
        """A healthy backend to ask about models (else any known one)."""
        stats = self.fleet.stats(self._clock())
        ok = [b.url for b in stats if b.active and b.healthy]
        return ok[0] if ok else (stats[0].url if stats else None)

    async def models(self, req: HttpRequest, resp: Responder) -> None:
        try:
            self.auth.authenticate(req.headers.get("authorization"), req.headers.get("x-api-key"))
        except AuthError as exc:
            return self._refuse(resp, 401, str(exc), "invalid_api_key")
        base = self._a_backend()
        if base is None:
            send_error(resp, 503, "no backend known yet", "upstream_error", "backend_unreachable")
            return
        try:
            timeout = aiohttp.ClientTimeout(total=10.0)
            async with self.session.get(base + "/v1/models", timeout=timeout) as up:
                raw = await up.read()
                ctype = up.headers.get("content-type", "application/json")
                status = up.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("backend %s failed: %s", self.backend_name(base), type(exc).__name__)
            message = "the backend is unreachable"
            send_error(resp, 503, message, "upstream_error", "backend_unreachable")
            return
        if status != 200:
            code, payload = upstream_error(status, raw)
            send_json(resp, code, payload)
        else:
            resp.send(200, raw, [("content-type", ctype)])

    async def health(self, req: HttpRequest, resp: Responder) -> None:
        resp.send(200, b'{"status":"ok"}', [JSON_HEADER])

    async def ready(self, req: HttpRequest, resp: Responder) -> None:
        self._send_ready(resp)

    async def metrics_endpoint(self, req: HttpRequest, resp: Responder) -> None:
        """The Prometheus text; 401 without `metrics.api_key` where one is set."""
        try:
            check_bearer(req.headers.get("authorization"), self.config.metrics.api_key)
        except AuthError as exc:
            return self._refuse(resp, 401, str(exc), "invalid_api_key")
        resp.send(200, self.metrics.render(), [("content-type", CONTENT_TYPE)])

    async def openapi(self, req: HttpRequest, resp: Responder) -> None:
        resp.send(200, self._openapi, [JSON_HEADER])

    def _snapshot(self) -> GaugeSnapshot:
        return core_snapshot(self.core, quota_local_share=self._quota_share())

    def _quota_share(self) -> int | None:
        """N while this replica enforces quota/N alone (Redis lost), 1 while Redis charges
        quotas, None without quotas or without Redis."""
        if self.shared is None or not self.core.quotas.enabled:
            return None
        return self.config.fleet.redis.replicas if self.shared.degraded else 1


Route = Callable[[HttpRequest, Responder], Awaitable[None]]
