"""What both live shells of GatewayCore do alike, written once so they cannot drift.

The standalone gateway (`live.gateway.server`, a proxy) and the Endpoint Picker
(`live.epp.server`, Envoy's ext_proc service) differ in how a request reaches its backend
and how its answer comes back. They do not differ in the rest: the core on engine
seconds and its fleet, fed by the monitor and the tick; a generation request
authenticated, validated, classified and counted, then handed to the core with a future
its effect wakes; its queue wait at release; its finish from the tokens its usage gives;
one outcome and one log line at its end; /ready. `CoreShell` is that part; each shell
subclasses it and carries out the core's effects its own way (`_carry_out`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.api import GenerationRequest, parse_request
from burstguard.core.gateway.auth import Identity, KeyAuthenticator
from burstguard.core.gateway.classify import Classifier
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.core import TICK_S, GatewayCore
from burstguard.core.gateway.events import Effect, Event, Finish, Scrape, Tick
from burstguard.core.gateway.request import GatewayRequest
from burstguard.errors import ConfigError
from burstguard.http.server import Responder
from burstguard.live.gateway.errors import send_error, send_json
from burstguard.live.gateway.metrics import GatewayMetrics, GaugeSnapshot, core_snapshot, is_retry
from burstguard.live.gateway.monitor import FleetMonitor
from burstguard.live.gateway.relay import SseRelay
from burstguard.tokenizer import ModelCounters
from burstguard.wire.outcomes import Outcome
from burstguard.wire.prefix import block_hashes

access_log = logging.getLogger("burstguard.core.gateway.access")
log = logging.getLogger("burstguard.core.gateway")


@dataclass(slots=True)
class Exchange:
    """One admitted request's story, for its outcome, the metrics and the log line (each
    shell adds what its way of serving needs)."""

    rid: str
    cls: str
    tenant: str
    route: str
    stream: bool
    arrival: float  # the request read whole (the shell's clock)
    prompt_tokens: int
    outcome: Outcome | None = None
    reason: str | None = None  # a Reason, or the backend's error code
    status: int = 0
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    output_tokens: int = 0
    relay: SseRelay | None = None  # a stream's relay (what its client received so far)


@dataclass(frozen=True, slots=True)
class Admission:
    """A generation request read, validated and classified."""

    ident: Identity | None
    gen: GenerationRequest
    data: dict[str, Any]  # its body, parsed
    cls: str
    tenant: str
    prompt_tokens: int


class CoreShell:
    """GatewayCore on the wall clock, its fleet, and the request's life both shells share."""

    _what = "gateway"  # in the tick's error line

    def __init__(
        self, config: GatewayConfig, snapshot: Callable[[], GaugeSnapshot] | None = None,
        preempt_ends: bool = False,
    ) -> None:  # fmt: skip
        discovery = config.fleet.discovery
        if not config.backends and discovery.dns is None and discovery.file is None:
            raise ConfigError("backends: at least one backend is required (or pass --backend URL)")
        self.config = config
        self._clock = time.monotonic  # the HTTP server stamps requests on it too
        self._speedup = config.engine_speedup  # the core's clock: engine seconds
        self.fleet = Fleet(config.fleet, (), self._clock())  # its clock: wall seconds
        self.core = GatewayCore(config, self.fleet, preempt_ends)
        self.auth = KeyAuthenticator(config.api_keys)
        self.classifier = Classifier(config)
        self.prompt_counters = ModelCounters(config.prompt_tokenizer)
        self.metrics = GatewayMetrics(snapshot or (lambda: core_snapshot(self.core)), self._clock)
        self.names = config.backend_names()  # what metrics and logs call a backend
        self._waiting: dict[str, asyncio.Future[Effect]] = {}
        self.monitor: FleetMonitor | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._tenant_header = config.tenant_header.lower()
        self._class_header = config.class_header.lower()

    # -- the driver: events to the core, its effects carried out --------------------

    def _now(self) -> float:
        """The core's clock: engine seconds (wall seconds x engine_speedup)."""
        return self._clock() * self._speedup

    def event(self, event: Event) -> None:
        """Hands `event` to the core and carries out every effect it returns."""
        for effect in self.core.handle(event, self._now()):
            self._carry_out(effect)

    def _carry_out(self, effect: Effect) -> None:
        raise NotImplementedError

    def _wake(self, rid: str, effect: Effect) -> None:
        """The effect to the request's waiting handler (none: it is not waiting)."""
        fut = self._waiting.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_result(effect)

    def _expect(self, rid: str) -> asyncio.Future[Effect]:
        """A future the core's next effect about `rid` wakes."""
        fut: asyncio.Future[Effect] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        return fut

    async def _start_monitor(self, session: aiohttp.ClientSession) -> None:
        """Discovery, scrapers and probes over the config's backends."""
        cfg = self.config
        metrics_urls = {u: b.metrics_url for b, u in zip(cfg.backends, cfg.backend_urls(),
                                                         strict=True) if b.metrics_url}  # fmt: skip
        self.monitor = FleetMonitor(
            self.fleet, session, static=cfg.backend_urls(), discovery=cfg.fleet.discovery,
            scrape_interval_s=cfg.scrape_interval_s, on_change=lambda _: self.event(Tick()),
            on_metrics=self._scraped, metrics_urls=metrics_urls, clock=self._clock,
        )  # fmt: skip
        await self.monitor.start()

    def _scraped(self, backend: str, state: BackendState, scraped_at: float) -> None:
        self.event(Scrape(state, backend))

    def _tick_event(self, ticks: int) -> Tick:
        """The `ticks`-th tick's event."""
        return Tick()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        ticks = 0
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.metrics.loop_lag.observe(max(0.0, loop.time() - due))
            ticks += 1
            try:
                self.event(self._tick_event(ticks))
            except Exception:  # the dispatcher must never die
                log.exception("%s tick failed", self._what)

    # -- a request's life -------------------------------------------------------------

    def _tenant_hint(self, headers: Mapping[str, str]) -> str | None:
        """The tenant a shell reads beyond the tenant header (None: none)."""
        return None

    def _class_hint(self, headers: Mapping[str, str], gen: GenerationRequest) -> str | None:
        """The class a shell reads beyond the class header (None: none)."""
        return None

    def _classify(
        self, ident: Identity | None, headers: Mapping[str, str], gen: GenerationRequest
    ) -> tuple[str, str]:
        """(class, tenant) by the rule the simulator applies too (`core.gateway.classify`)."""
        key_tier, key_tenant = (ident.tier, ident.tenant) if ident is not None else (None, None)
        tenant = self.classifier.tenant(
            key_tenant, headers.get(self._tenant_header) or self._tenant_hint(headers)
        )
        named = headers.get(self._class_header) or self._class_hint(headers, gen)
        return self.classifier.classify(key_tier, named, gen.priority), tenant

    def _admit(
        self, model: type[GenerationRequest], body: bytes, headers: Mapping[str, str]
    ) -> Admission:
        """Authenticates (AuthError: 401), validates (BadRequest: 400), classifies and
        counts the prompt of a generation request."""
        ident = self.auth.authenticate(headers.get("authorization"), headers.get("x-api-key"))
        gen, data = parse_request(model, body)
        cls, tenant = self._classify(ident, headers, gen)
        prompt_tokens = gen.prompt_tokens(self.prompt_counters.for_model(gen.model).count)
        return Admission(ident, gen, data, cls, tenant, prompt_tokens)

    def _arrival(
        self, a: Admission, route: str, arrival: float, headers: Mapping[str, str],
        resumable: bool, **more: Any,
    ) -> GatewayRequest:  # fmt: skip
        """The core's view of an admitted request (counted as arrived), under a new id:
        a whole UUID4, since backends may validate it (llama-cpp-python answers 400)."""
        self.metrics.arrived(a.cls, is_retry(headers))
        self.metrics.prompt_arrived(a.cls, a.prompt_tokens)
        router = self.config.fleet.router
        hashes = (block_hashes(a.gen.cache_text(), router.block_tokens, router.affinity_blocks)
                  if router.affinity else ())  # fmt: skip
        return GatewayRequest(uuid.uuid4().hex, arrival * self._speedup, a.prompt_tokens,
                              a.gen.output_limit(), a.cls, a.tenant, route, resumable,
                              prefix_hashes=hashes, **more)  # fmt: skip

    def _released(self, ex: Exchange) -> float:
        """Now; at its first release, its queue wait is taken."""
        now = self._clock()
        if ex.queue_wait_s is None:
            ex.queue_wait_s = now - ex.arrival
            self.metrics.queue_wait_of(ex.cls).observe(ex.queue_wait_s)
        return now

    def _finished(self, ex: Exchange, tokens: int) -> None:
        """Its answer is whole with `tokens` output tokens: completed, told to the core."""
        ex.output_tokens = tokens
        ex.outcome = Outcome.COMPLETED
        self.metrics.completed(ex.cls, ex.prompt_tokens, tokens)
        self.event(Finish(ex.rid, tokens))

    def _log_line(self, ex: Exchange, outcome: Outcome, **more: Any) -> None:
        """The request's one JSON log line (`more`: the shell's own fields)."""
        if self.config.log_requests and access_log.isEnabledFor(logging.INFO):
            access_log.info(orjson.dumps({  # (json.dumps: 5 us of every request, orjson 0.3)
                "id": ex.rid, "class": ex.cls, "tenant": ex.tenant, "route": ex.route,
                "stream": ex.stream, "outcome": outcome, "reason": ex.reason,
                "status": ex.status or None, "queue_wait_s": _round(ex.queue_wait_s),
                "ttft_s": _round(ex.ttft_s), "prompt_tokens": ex.prompt_tokens,
                "output_tokens": ex.output_tokens, **more,
                "duration_s": _round(self._clock() - ex.arrival),
            }).decode())  # fmt: skip

    def _send_ready(self, resp: Responder) -> None:
        """200 while at least one backend is healthy (its circuit closed, its last /health
        probe answered), else 503. Counts only: backend addresses are not for clients."""
        now = self._clock()
        healthy = sum(1 for b in self.fleet.stats(now) if b.active and b.healthy and b.up)
        if healthy:
            send_json(resp, 200, {"status": "ready", "healthy_backends": healthy})
        else:
            message = f"no healthy backend (of {len(self.fleet.backends)})"
            send_error(resp, 503, message, "upstream_error", "backend_unreachable")


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
