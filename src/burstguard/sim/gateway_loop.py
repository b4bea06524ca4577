"""Virtual-clock driver for gateway + engine: `burstguard sim --gateway gateway.yaml`.

The same GatewayCore the live server runs (one core, two clocks) sits in front of the same
EngineCore the emulator runs. Entities on an event heap (`sim.heap`) play the server's
part with a virtual clock, through the core's driver protocol (`core.gateway.events`), so a
policy compared here is the policy deployed:

- clients: each arrival is an `Arrive` event at its arrival time; a `Reject` effect is
  its 429 (with Retry-After) at once (over its tenant's quota: error `quota_exceeded`,
  the quota being the core's, charged in its own buckets);
- the gateway: a `Tick` every TICK_S and a `Scrape` of the engine's own gauges (waiting,
  running, KV usage) every `scrape_interval_s` — both wall times of the live gateway,
  so engine_speedup x that here; the core's `Release` effects go straight to the engine
  (no HTTP hop), with vLLM's `priority` when the backend forwards it; `Preempt` aborts
  the engine request and keeps the client's tokens; a resumed `Release` adds a new engine
  request for the prompt plus those tokens, asking for the rest (what the live gateway
  sends: completions prompt + text so far). With `epp`, the config as `burstguard epp`
  runs it (`core.gateway.epp`): a `Preempt` that does not resume ends the request at
  once with the picker's answers, an in-band error after its first token (status 200,
  `stream_broken`, the tokens it received), else a 503 `preempted`;
- the engine replicas (`sim.replicas.ReplicaSet`, `--replicas N`): each `Release` names
  the replica the core's router picked, as it names a live backend; each replica steps on
  its own, its first tokens and finishes flow back as events, and each is scraped on its
  own (`Scrape(state, replica)`). Replicas can be added and drained while the run goes
  on (`_GatewaySim.replicas`: an autoscaler drives it);
- faults (`sim.faults`, `--faults`): a killed replica's requests fail as a reset
  connection does live (`BackendFailed(reset)`), what is released to it while it is down
  is refused (`connect`); a stalled one holds its requests silent until its backend
  settings' `read_timeout_s` (`timeout`) or its restart (`reset`). Each failure is one of
  `core.gateway.failure.Failure`, the kinds the live server classifies into, and the core's
  failure rules decide what follows (failover, the retry budget, the circuit breaker,
  `Abandon`, answered with the failure's status as live). With a fault schedule the
  gateway also probes each replica's /health on every tick, as its prober does: a dead
  one is refused at once, a stalled one times out after `probe_timeout_s`, and the
  breaker closes again once a restarted one answers. Its scrapes fail meanwhile, so its
  last metrics age.

While nothing is queued, in flight or running, the tick and scrape stop, and restart on
their grid at the next arrival, so days-long traces do not cost 20 ticks per idle second.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import (
    DecodeRun,
    EngineCore,
    EngineRequest,
    RequestRejected,
    StepResult,
    check_priority,
)
from burstguard.core.engine.profile import Profile
from burstguard.core.fleet.config import RouterConfig
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.names import BackendNames
from burstguard.core.gateway.api import BadRequest
from burstguard.core.gateway.classify import Classifier
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.core import PROGRESS_S, TICK_S, GatewayCore, GatewayStats
from burstguard.core.gateway.epp import epp_config, preempt_ends
from burstguard.core.gateway.events import (
    Abandon,
    Abort,
    Arrive,
    BackendFailed,
    Circuit,
    Effect,
    Event,
    Fail,
    Finish,
    FirstToken,
    Forget,
    Preempt,
    Reject,
    Release,
    Scrape,
    Settle,
    Tick,
)
from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.request import GatewayRequest
from burstguard.core.scaling import ScalingPolicy
from burstguard.core.scaling.signals import WorkCounts, gateway_signals
from burstguard.sim.autoscaling import ScalingDriver, discovery_lag_s
from burstguard.sim.client_retries import ClientRetry, RetryingClients
from burstguard.sim.faults import Fault, FaultKind, check_replicas
from burstguard.sim.heap import EventHeap
from burstguard.sim.loop import RecordBook, SimResult, engine_prefix, served_prompt
from burstguard.sim.replicas import Health, ReplicaSet, replica_id
from burstguard.sim.series import SeriesRecorder
from burstguard.wire.outcomes import Outcome, Reason
from burstguard.wire.prefix import block_hashes, chat_text
from burstguard.wire.records import RequestRecord
from burstguard.wire.tokens import CHARS_PER_TOKEN
from burstguard.workload.prompts import PromptRenderer, chat_content_tokens
from burstguard.workload.sessions import Dependencies
from burstguard.workload.spec import RequestSpec, Workload

__all__ = ["GatewaySimResult", "gateway_summary", "simulate_gateway"]

# ties at one instant: a step's end, then arrivals, the scrape, the tick, (the autoscaler,)
# faults and what follows from them (timeouts, restarts, probe answers)
ARRIVAL, SCRAPE, TICK = range(1, 4)  # a step's end is 0 (`sim.replicas.STEP`)
FAULT = 5  # after the autoscaler's 4 (`sim.autoscaling.AUTOSCALE`)


@dataclass
class GatewaySimResult(SimResult):
    """SimResult plus the gateway's own counters (outcomes by class, rejection reasons,
    preemptions) and the tokens prefilled again to resume preempted requests."""

    gateway: GatewayStats | None = None
    reprefill_tokens: int = 0
    routed: dict[str, int] | None = None  # its name -> requests sent to it (failovers incl.)
    failovers: dict[str, int] | None = None  # the fleet's answers to failures, by outcome
    scaling: dict[str, Any] | None = None  # `ScalingDriver.summary`, with an autoscaler
    quota_refused: dict[str, list[int]] | None = None  # tenant -> [requests, tokens] refused
    served_by: dict[str, str] | None = None  # request id -> the name of its last replica


def _next_on_grid(t: float, period: float) -> float:
    """The first multiple of `period` at or after `t` (live ticks keep their phase)."""
    return math.ceil(t / period - 1e-9) * period


def routing_hashes(
    spec: RequestSpec, prompts: PromptRenderer, router: RouterConfig
) -> tuple[int, ...]:
    """What the live gateway's prefix affinity keys on for `spec`: the leading blocks of the
    text bench sends for it (a one-message chat, bench's default API); () without affinity."""
    if not router.affinity:
        return ()
    width = router.affinity_blocks * router.block_tokens * CHARS_PER_TOKEN
    content = prompts.text(spec, chat_content_tokens(spec.prompt_tokens), width)
    return block_hashes(chat_text([("user", content)]), router.block_tokens,
                        router.affinity_blocks)  # fmt: skip


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py); tests spy by subclassing
class _GatewaySim:
    """One run: the entities (clients, gateway, engine replicas) on one event heap."""

    def __init__(
        self,
        workload: Workload,
        engine: EngineConfig,
        profile: Profile,
        gateway: GatewayConfig,
        replicas: int = 1,
        replica_profiles: Sequence[Profile] | None = None,
        scaling: ScalingPolicy | None = None,
        seed: int = 0,
        fast_forward: bool = True,
        faults: Sequence[Fault] = (),
        epp: bool = False,
        retry: ClientRetry | None = None,
    ) -> None:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        if replica_profiles is not None and len(replica_profiles) != replicas:
            raise ValueError("replica_profiles: one profile per replica")
        if epp:
            gateway = epp_config(gateway)[0]
        self.workload = workload
        self.rows = workload.rows()  # read request by request
        self.config = gateway
        self.heap = EventHeap()
        self.fleet = Fleet(gateway.fleet)
        self.gw = GatewayCore(gateway, self.fleet, epp and preempt_ends(gateway))
        self.classifier = Classifier(gateway)
        self.refused = 0  # refused before the gateway (400): not arrivals to its signals
        self.replicas = ReplicaSet(
            self.heap, engine, profile, self.step_end, self.run_end if fast_forward else None,
            fleet=self.fleet, fleet_scale=1.0 / gateway.engine_speedup,
        )  # fmt: skip
        # a config that lists exactly this many backends names them (the router's ring
        # places keys by name, so a simulated fleet of those backends routes as the live
        # one); otherwise the replicas are numbered
        named = list(gateway.backend_urls())
        self.ids = named if len(named) == replicas else [replica_id(i) for i in range(replicas)]
        # what the summary calls them: the live gateway's names (`core.fleet.names`) for
        # the config's backends, else backend-<i> as for that many `--backend` flags;
        # replicas an autoscaler adds later are named as discovered ones
        self.names = gateway.backend_names() if self.ids == named else BackendNames(
            ((r, None) for r in self.ids), by_url=gateway.backend_labels == "url")  # fmt: skip
        for i, url in enumerate(self.ids):
            own = None if replica_profiles is None else replica_profiles[i]
            self.replicas.add_replica(url, 0.0, own)
        check_replicas(tuple(faults), replicas)
        for fault in faults:
            self.heap.at(fault.at_s, FAULT, partial(self.fault, fault))
        self.probing = bool(faults)  # probes answered "up" change nothing: none without
        self.probe_timeout_s = gateway.fleet.health.probe_timeout_s * gateway.engine_speedup
        self.failures: dict[str, Failure] = {}  # request id -> its last backend failure
        self.hung: dict[str, float] = {}  # request id -> its read timeout on a stalled replica
        self.back_at: dict[str, float] = {}  # stalled replica -> when it restarts (inf: never)
        self.wedged: set[str] = set()  # stalled replicas whose /health still answers
        self.profile = profile
        self.where: dict[str, str] = {}  # request id -> the replica running it
        self.routed: dict[str, int] = {}
        # the engine's series (`server_series`) is the first replica's, as bench scrapes one
        # target; none under an autoscaler, which may drain that replica away
        self.recorder = (
            SeriesRecorder(self.replicas.engine(self.ids[0])) if scaling is None else None
        )
        self.book = RecordBook()
        self.max_tokens: dict[str, int] = {}
        self.prefix: dict[str, tuple[int, ...]] = {}  # request id -> its engine prefix blocks
        self.block_tokens = workload.prefix_block_tokens  # read once, not per arrival
        self.prompts = PromptRenderer(self.block_tokens)
        self.engine_config = engine
        self.reprefill_tokens = 0
        self.tick_s = TICK_S * gateway.engine_speedup
        self.progress_every = max(1, round(PROGRESS_S / TICK_S))  # ticks between `progressed`
        self._ticks = 0
        self.circuits: list[tuple[float, str, str]] = []  # (time, backend, state) as logged
        self.scrape_s = gateway.scrape_interval_s * gateway.engine_speedup
        self._clocked = False  # the tick and scrape are scheduled
        self._generation = 0  # bumped when they stop: a stopped one scheduled before drops
        self.arrivals = 0
        self.quota_refused: dict[str, list[int]] = {}  # tenant -> [requests, tokens]
        self.work = WorkCounts()  # token counters, as the live gateway's /metrics
        # a session workload: requests that wait for others are sent as those end
        self.deps = Dependencies.of(workload)
        self.clients = (
            None if retry is None else RetryingClients(retry, gateway.engine_speedup, seed)
        )
        self.index = (
            {self.rows.request_id(i): i for i in range(len(workload))}
            if self.deps or self.clients
            else {}
        )
        self.ended: set[str] = set()
        self._arrivals: list[float] = []  # arrival times, when fed one at a time (`run`)
        self._next_arrival = 0
        self.scaler = (
            None
            if scaling is None
            else ScalingDriver(self.heap, self.replicas, scaling, replicas, self._signals,
                               self._scaling_active, seed, discovery_lag_s(gateway))
        )  # fmt: skip

    # -- clients -----------------------------------------------------------------------

    def arrive(self, i: int, now: float) -> None:
        spec = self.rows.spec(i)
        if spec.after:  # released by its predecessors: scheduled when sent
            spec = replace(spec, arrival_s=now)
        if self.clients is not None:
            self.clients.on_request(now)
        self.send(spec, now)

    def resend(self, first: str, retry_id: str, now: float) -> None:
        """A client sends its request again (`sim.client_retries`): a new request to the
        gateway, of the same content."""
        assert self.clients is not None
        self.clients.on_retry_sent()
        spec = self.rows.spec(self.index[first])
        self.send(replace(spec, id=retry_id, arrival_s=now), now)

    def send(self, spec: RequestSpec, now: float) -> None:
        try:  # bench sends the class as the class header: the live gateway's rule
            cls = self.classifier.classify(named=spec.priority_class)
            tenant = self.classifier.tenant(named=spec.tenant)
        except BadRequest:  # the live gateway's 400, as bench records it
            rec = self.book.open(spec, served_prompt(spec, self.profile))
            self._answered(rec, now, 400, "http_400")
            self._release(spec.id, now)
            self.refused += 1
            return
        self.arrivals += 1
        rec = self.book.open(spec, served_prompt(spec, self.profile), priority_class=cls)
        self.work.arrived(rec.prompt_tokens or 0)
        self.max_tokens[spec.id] = spec.max_tokens
        if not self._clocked:  # the gateway wakes from idle: its periodic events restart
            self._clocked = True
            for url, state in self.replicas.states():
                self.gw.handle(Scrape(state, url), now)
            gen = self._generation
            self.heap.at(_next_on_grid(now, self.scrape_s), SCRAPE, lambda t: self.scrape(t, gen))
            self.heap.at(_next_on_grid(now, self.tick_s), TICK, lambda t: self.tick(t, gen))
        block_size = self.engine_config.block_size
        self.prefix[spec.id] = engine_prefix(spec, self.block_tokens, block_size)
        req = GatewayRequest(spec.id, now, spec.prompt_tokens, spec.max_tokens, cls, tenant,
                             prefix_hashes=self.routing_hashes(spec))  # fmt: skip
        self.event(Arrive(req), now)

    def _arrive_next(self, now: float) -> None:
        """The workload's next arrival, which puts the one after it on the heap first:
        the heap holds one arrival at a time, not every one yet to come (a day's million
        made each push and pop walk ~20 levels). The same order: arrivals are the only
        events of their rank without sessions, and come in workload order at one instant
        as they did when all were scheduled at the start."""
        i = self._next_arrival
        self._next_arrival = i + 1
        if i + 1 < len(self._arrivals):
            self.heap.at(self._arrivals[i + 1], ARRIVAL, self._arrive_next)
        self.arrive(i, now)

    def routing_hashes(self, spec: RequestSpec) -> tuple[int, ...]:
        return routing_hashes(spec, self.prompts, self.config.fleet.router)

    @staticmethod
    def _answered(rec: RequestRecord, now: float, status: int, error: str) -> None:
        rec.status, rec.error = status, error
        rec.e2e_s = now - rec.scheduled_s  # when the answer reached the client

    def _release(self, rid: str, now: float) -> None:
        """`rid` ended (answered, refused, abandoned): its client sends it again
        (`sim.client_retries`), or what waited for it is sent (`Dependencies.ended`),
        once per request. What only a dispatch reads goes: the tables hold the requests
        under way, not a day's millions."""
        self.max_tokens.pop(rid, None)
        self.prefix.pop(rid, None)
        if self.clients is not None:
            again = self.clients.retry(rid, self.book.records[rid], now)
            if again is not None:
                retry_id, delay = again
                first = self.clients.first(rid)
                self.heap.at(now + delay, ARRIVAL, partial(self.resend, first, retry_id))
                return
            rid = self.clients.first(rid)
        if self.deps is None or rid in self.ended:
            return
        self.ended.add(rid)
        for j, at in self.deps.ended(self.index[rid], now):
            self.heap.at(at, ARRIVAL, partial(self.arrive, j))

    # -- the gateway: events in, effects carried out -----------------------------------

    def event(self, event: Event, now: float) -> None:
        for effect in self.gw.handle(event, now):
            self.carry_out(effect, now)

    def carry_out(self, effect: Effect, now: float) -> None:
        if isinstance(effect, Forget):
            self.replicas.forgotten(effect.backend, now)
            return
        if isinstance(effect, Settle):  # never: the sim's quotas are the core's own
            return
        if isinstance(effect, Circuit):  # the live gateway logs it
            self.circuits.append((now, effect.backend, effect.state))
            return
        rid = effect.req.id
        rec = self.book.records[rid]
        if isinstance(effect, Reject):
            quota = effect.reason == Reason.QUOTA
            self._answered(rec, now, 429, Reason.QUOTA if quota else Outcome.REJECTED)
            rec.retry_after_s = effect.retry_after_s
            if quota:
                req = effect.req
                tenant = req.tenant or self.config.default_tenant
                refused = self.quota_refused.setdefault(tenant, [0, 0])
                refused[0] += 1
                refused[1] += req.prompt_tokens + (req.max_tokens or 0)
            self._release(rid, now)
        elif isinstance(effect, Preempt):
            self.replicas.engine(self.where[rid]).abort(rid, now)
            if effect.resume:
                self.book.resume(rid)
            else:  # ended (the picker's cut): an error, never resumed
                if rec.ttft_s is not None:  # the last event of the stream it has
                    self._answered(rec, now, 200, "stream_broken")
                    rec.completion_tokens = self.book.produced(rid)
                else:
                    self._answered(rec, now, 503, "http_503")
                rec.error_code = Reason.PREEMPTED
                self._release(rid, now)
        elif isinstance(effect, Abort):  # past its deadline, or its circuit opened
            url = self.where[rid]
            if url in self.replicas.replicas or url in self.replicas.draining:
                self.replicas.engine(url).abort(rid, now)
            self.hung.pop(rid, None)
            if rec.ttft_s is not None:  # its client keeps what it has
                self.book.resume(rid)
            if effect.failure is not None:  # (None: a live gateway's drain; none here)
                self.failures[rid] = effect.failure
        elif isinstance(effect, Abandon):  # its last failure goes to the client, as live
            if rec.ttft_s is not None:  # in-band: an error event ends the stream it has
                self._answered(rec, now, 200, "stream_broken")
                rec.completion_tokens = self.book.produced(rid)
            else:
                status = self.failures.get(rid, Failure.RESET).status
                self._answered(rec, now, status, f"http_{status}")
            self._release(rid, now)
        else:
            self.release(effect, rec, now)

    def release(self, effect: Release, rec: RequestRecord, now: float) -> None:
        rid = effect.req.id
        self.where[rid] = effect.backend
        self.routed[effect.backend] = self.routed.get(effect.backend, 0) + 1
        health = self.replicas.health(effect.backend)
        if health is Health.DOWN:  # connection refused
            self.failed(rid, Failure.REFUSED, now)
            return
        engine = self.replicas.engine(effect.backend)
        have = self.book.resumed(rid) if effect.resumed else 0
        prompt = (rec.prompt_tokens or 0) + have
        if effect.resumed:
            self.reprefill_tokens += prompt
        priority = 0 if effect.priority is None else effect.priority
        try:
            check_priority(engine.config, priority)
            engine.add_request(
                EngineRequest(
                    rid, prompt, self.max_tokens[rid] - have, now, priority, self.prefix[rid]
                ),
                now,
            )
        except RequestRejected:  # the backend's 400 passes through to the client
            self._answered(rec, now, 400, "http_400")
            self.work.refused(rec.prompt_tokens or 0)
            self.event(Fail(rid), now)
            self._release(rid, now)
            return
        if health is Health.STALLED:  # sent; no answer will come
            self.hang(rid, effect.backend, engine, now)
            return
        self.replicas.kick(effect.backend, now)

    # -- faults ------------------------------------------------------------------------

    def fault(self, fault: Fault, now: float) -> None:
        """Kills or stalls a replica; restarts it after `restart_after`."""
        url = (
            self.ids[fault.replica] if fault.replica < len(self.ids) else replica_id(fault.replica)
        )
        if url not in self.replicas.replicas and url not in self.replicas.draining:
            return  # an autoscaler removed it already
        if fault.kind is FaultKind.KILL:
            for rid in self.replicas.kill(url, now):
                self.failed(rid, Failure.RESET, now)
        else:
            self.back_at[url] = fault.until_s
            if fault.kind is FaultKind.WEDGE:
                self.wedged.add(url)
            engine = self.replicas.engine(url)
            for rid in self.replicas.stall(url, now):
                self.hang(rid, url, engine, now)
        if fault.restart_after_s is not None:
            self.heap.at(fault.until_s, FAULT, partial(self.restart, url))

    def restart(self, url: str, now: float) -> None:
        """The replica is back, empty: what its stalled process held is cut (reset)."""
        if url not in self.replicas.replicas and url not in self.replicas.draining:
            return
        self.wedged.discard(url)
        for rid in self.replicas.restart(url):
            self.hung.pop(rid, None)
            self.failed(rid, Failure.RESET, now)

    def hang(self, rid: str, url: str, engine: EngineCore, now: float) -> None:
        """`rid` waits on a stalled replica: its read timeout (silence from now) is due,
        unless the replica's restart cuts it first (no event then: the run ends on time)."""
        timeout = self.config.backend_config(url).read_timeout_s * self.config.engine_speedup
        self.hung[rid] = deadline = now + timeout
        if deadline < self.back_at[url]:
            self.heap.at(deadline, FAULT, partial(self.timed_out, rid, url, engine))

    def timed_out(self, rid: str, url: str, engine: EngineCore, now: float) -> None:
        """The backend's read timeout for a request on a stalled replica, if it still
        waits there (not preempted, restarted or sent there again since)."""
        if self.hung.get(rid) != now or self.replicas.stalled_engine(url) is not engine:
            return
        del self.hung[rid]
        if engine.abort(rid, now):
            self.failed(rid, Failure.TIMEOUT, now)

    def failed(self, rid: str, failure: Failure, now: float) -> None:
        """Reports the failure to the core as the live relay does; a client that holds
        tokens keeps them (a resumed request continues from there)."""
        rec = self.book.records[rid]
        started = rec.ttft_s is not None
        if started:
            self.book.resume(rid)
        self.failures[rid] = failure
        self.event(BackendFailed(rid, failure.reason, started), now)

    def probe_failed(self, url: str, now: float) -> None:
        self.fleet.on_probe(url, False, now / self.config.engine_speedup)

    def probe(self, now: float) -> None:
        """The gateway's /health probes that are due (fleet clock: wall seconds)."""
        speedup = self.config.engine_speedup
        for url in self.fleet.probes_due(now / speedup):
            health = self.replicas.health(url)
            if health is Health.STALLED and url in self.wedged:  # its server answers
                self.fleet.on_probe(url, True, now / speedup)
            elif health is Health.STALLED:  # no answer: it times out
                self.heap.at(now + self.probe_timeout_s, FAULT, partial(self.probe_failed, url))
            else:
                self.fleet.on_probe(url, health is Health.UP, now / speedup)

    def scrape(self, now: float, gen: int) -> None:
        if self._stopped(gen):
            return
        for url, state in self.replicas.states():
            self.event(Scrape(state, url), now)
        self.heap.at(now + self.scrape_s, SCRAPE, lambda t: self.scrape(t, gen))

    def tick(self, now: float, gen: int) -> None:
        if self._stopped(gen):
            return
        if self.probing:
            self.probe(now)
        self._ticks += 1
        progressed: list[str] = []
        if self._ticks % self.progress_every == 0 and self.config.backend_deadlines.enabled:
            progressed = self._progressed()
        self.event(Tick(progressed), now)
        self.heap.at(now + self.tick_s, TICK, lambda t: self.tick(t, gen))

    def _progressed(self) -> list[str]:
        """What the live shell would report as progressing: every request on a replica
        that steps (a stalled one sends nothing). A request the engine holds waiting (KV
        preemption) counts as progressing here; live its stream is silent meanwhile."""
        out: list[str] = []
        for url in self.fleet.backends:
            if self.replicas.health(url) is Health.UP:
                out += self.fleet.requests_on(url)
        return out

    def _stopped(self, gen: int) -> bool:
        """True for a periodic event of a stopped generation; stops them when all is idle."""
        if gen != self._generation:
            return True
        if not self._idle():
            return False
        self._generation += 1
        self._clocked = False
        return True

    def _signals(self) -> dict[str, float]:
        return gateway_signals(
            self.gw.stats, self.arrivals, self.work, self.gw.backend_states.values()
        )

    def _scaling_active(self) -> bool:
        first_tries = self.arrivals + self.refused
        if self.clients is not None:
            if self.clients.pending:
                return True
            first_tries -= self.clients.sent
        return first_tries < len(self.workload) or not self._idle()

    def _idle(self) -> bool:
        return not self.gw.holds_requests and self.replicas.idle

    # -- the engine replicas -----------------------------------------------------------

    def step_end(self, replica: str, result: StepResult, now: float) -> None:
        events = self.book.apply(result)
        if self.recorder is not None and replica == self.ids[0]:
            self.recorder.observe(now, result.num_prefill_tokens + result.num_decode_seqs, 1)
        for rid in events.first_token:
            self.event(FirstToken(rid), now)
        for rid in events.finished:
            self.finish(rid, now)

    def run_end(self, replica: str, run: DecodeRun, now: float) -> None:
        """A fast-forwarded run of decode steps (`sim.replicas`), ending at `now`: the
        tokens as `step_end` would have seen them; only its last step can finish some
        (decode steps give no first token: the prefill step did)."""
        self.book.apply_run(run)
        if self.recorder is not None and replica == self.ids[0]:
            self.recorder.observe(now, sum(k for _, k, _ in run.tokens), len(run.ends))
        for rid in run.finished:
            self.finish(rid, now)

    def finish(self, rid: str, now: float) -> None:
        produced = self.book.produced(rid)
        self.work.completed(self.book.records[rid].prompt_tokens or 0, produced)
        self.event(Finish(rid, produced), now)
        self._release(rid, now)

    # -- the run -----------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> GatewaySimResult:
        arrivals = self.rows.arrival_s
        if self.deps is None and bool(np.all(np.diff(self.workload.arrival_s) >= 0)):
            self._arrivals = arrivals  # sorted: each arrival puts the next on the heap
            if arrivals:
                self.heap.at(arrivals[0], ARRIVAL, self._arrive_next)
        else:
            for i in range(len(arrivals)) if self.deps is None else self.deps.roots:
                self.heap.at(arrivals[i], ARRIVAL, partial(self.arrive, i))
        end = self.heap.run(progress)
        n = len(arrivals)
        book = self.book.records
        ids = [self.rows.request_id(k) for k in range(n)]
        clients = self.clients
        records = (
            [book[rid] for rid in ids]
            if clients is None
            else [clients.record(rid, book) for rid in ids]
        )
        where = self.where
        if clients is not None:  # a request's last try's replica
            where = {clients.first(rid): url for rid, url in self.where.items()}
        result = GatewaySimResult(
            records=records,
            preemptions=self.replicas.preemptions,
            steps=self.replicas.steps,
            end_s=end,
            series=None if self.recorder is None else self.recorder.series(end),
            gateway=self.gw.stats,
            reprefill_tokens=self.reprefill_tokens,
            routed={self.names(r): n for r, n in self.routed.items()},
            served_by={rid: self.names(r) for rid, r in where.items()},
            failovers=dict(self.fleet.failover_outcomes),
            prefix_cache=self.replicas.prefix_cache,
            scaling=None if self.scaler is None else self.scaler.summary(end),
            quota_refused=self.quota_refused,
        )
        self.replicas.detach()
        if self.scaler is not None:
            self.scaler.detach()
        return result


def simulate_gateway(
    workload: Workload,
    engine: EngineConfig,
    profile: Profile,
    gateway: GatewayConfig,
    replicas: int = 1,
    replica_profiles: Sequence[Profile] | None = None,
    scaling: ScalingPolicy | None = None,
    seed: int = 0,
    fast_forward: bool = True,
    progress: Callable[[float], None] | None = None,
    faults: Sequence[Fault] = (),
    epp: bool = False,
    retry: ClientRetry | None = None,
) -> GatewaySimResult:
    """Runs `workload` through the gateway policies of `gateway` into `replicas` engine
    replicas behind its router (each of `profile`, or of its own `replica_profiles`), in
    virtual time; every request ends completed, rejected (429) or refused by the engine.
    With `scaling`, its autoscaler adds and drains replicas from `replicas` on (cold starts
    drawn with `seed`). `fast_forward` applies runs of pure decode steps at once (same
    records, computed faster; `sim.replicas`). `progress(virtual now)` is called now and
    then (`EventHeap.run`). `faults` kill or stall replicas on a schedule (`sim.faults`;
    a `FaultFileError` names one that is not among `replicas`). `epp`: `gateway` as
    `burstguard epp` runs it (`core.gateway.epp`: no resume; preempted requests ended
    under `epp.preempt: end`). `retry`: the clients send a request that ended with a
    retryable error again, as bench's `--retry` (`sim.client_retries`); without it none
    does."""
    return _GatewaySim(
        workload, engine, profile, gateway, replicas, replica_profiles, scaling, seed,
        fast_forward, faults, epp, retry,
    ).run(progress)  # fmt: skip


def gateway_summary(
    result: GatewaySimResult, config: GatewayConfig, source: str = ""
) -> dict[str, Any]:
    """The summary's `gateway` block: per class, what was shed and who met its TTFT target
    (a shed request counts as a miss: the promise is to the caller, not to the engine),
    and the gateway's preemptions with the tokens prefilled again to resume them."""
    classes: dict[str, Any] = {}
    stats = result.gateway
    for c in sorted(config.classes, key=lambda c: c.rank):
        mine = [r for r in result.records if r.priority_class == c.name]
        shed = sum(1 for r in mine if r.status == 429)
        met = None
        if c.ttft_target_s is not None and mine:
            target = c.ttft_target_s
            hit = sum(1 for r in mine if r.ok and r.ttft_s is not None and r.ttft_s <= target)
            met = hit / len(mine)
        classes[c.name] = {
            "requests": len(mine),
            "completed": sum(1 for r in mine if r.ok),
            "rejected": shed,
            "shed_fraction": shed / len(mine) if mine else None,
            "ttft_target_s": c.ttft_target_s,
            "ttft_target_attainment": met,
            "preemptions": stats.preemptions.get(c.name, 0) if stats is not None else 0,
        }
    out = {
        "config": source,
        "classes": classes,
        "rejections": stats.rejections if stats is not None else {},
        "preemptions": sum(stats.preemptions.values()) if stats is not None else 0,
        "reprefill_tokens": result.reprefill_tokens,
    }
    if (
        config.quotas.default
        or config.quotas.tenants
        or config.quotas.classes
        or any(k.quota for k in config.api_keys)
    ):
        out["quota"] = quota_summary(result, config.default_tenant)
    return out


QUOTA_TENANTS_SHOWN = 20


def quota_summary(result: GatewaySimResult, default_tenant: str) -> dict[str, Any]:
    """The summary's `core.gateway.quota` block: per tenant, the requests and tokens (prompt +
    output) admitted and those its quota refused (prompt + max_tokens), the
    `QUOTA_TENANTS_SHOWN` most refused first; the other tenants summed as `~other`."""
    rows: dict[str, dict[str, int]] = {}

    def row(tenant: str) -> dict[str, int]:
        return rows.setdefault(tenant, {"admitted_requests": 0, "admitted_tokens": 0,
                                        "refused_requests": 0, "refused_tokens": 0})  # fmt: skip

    for r in result.records:
        if r.ok:
            mine = row(r.tenant or default_tenant)
            mine["admitted_requests"] += 1
            mine["admitted_tokens"] += (r.prompt_tokens or 0) + (r.completion_tokens or 0)
    for tenant, (n, tokens) in (result.quota_refused or {}).items():
        mine = row(tenant)
        mine["refused_requests"] += n
        mine["refused_tokens"] += tokens
    order = sorted(rows, key=lambda t: (-rows[t]["refused_tokens"], -rows[t]["admitted_tokens"], t))
    shown = {t: rows[t] for t in order[:QUOTA_TENANTS_SHOWN]}
    if len(order) > QUOTA_TENANTS_SHOWN:
        other = {k: 0 for k in next(iter(rows.values()))}
        for t in order[QUOTA_TENANTS_SHOWN:]:
            for k, v in rows[t].items():
                other[k] += v
        shown["~other"] = other
    return {"tenants": shown}
