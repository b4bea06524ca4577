"""Virtual-clock driver for gateway + engine: `burstguard sim --gateway gateway.yaml`.

The same GatewayCore the live server runs (one core, two clocks) sits in front of the same
EngineCore the emulator runs. Entities on an event heap (`sim.heap`) play the server's
part with a virtual clock, through the core's driver protocol (`gateway.events`), so a
policy compared here is the policy deployed:

- clients: each arrival is an `Arrive` event at its arrival time; a `Reject` effect is
  its 429 (with Retry-After) at once;
- the gateway: a `Tick` every TICK_S and a `Scrape` of the engine's own gauges (waiting,
  running, KV usage) every `scrape_interval_s` — both wall times of the live gateway,
  so engine_speedup x that here; the core's `Release` effects go straight to the engine
  (no HTTP hop), with vLLM's `priority` when the backend forwards it; `Preempt` aborts
  the engine request and keeps the client's tokens; a resumed `Release` adds a new engine
  request for the prompt plus those tokens, asking for the rest (what the live gateway
  sends: completions prompt + text so far);
- the engine replicas (`sim.replicas.ReplicaSet`, `--replicas N`): each `Release` names
  the replica the core's router picked, as it names a live backend; each replica steps on
  its own, its first tokens and finishes flow back as events, and each is scraped on its
  own (`Scrape(state, replica)`). Replicas can be added and drained while the run goes
  on (`_GatewaySim.replicas`: an autoscaler drives it).

While nothing is queued, in flight or running, the tick and scrape stop, and restart on
their grid at the next arrival, so days-long traces do not cost 20 ticks per idle second.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from burstguard.autoscale import ScalingPolicy
from burstguard.autoscale.signals import gateway_signals
from burstguard.bench.records import RequestRecord
from burstguard.engine.config import EngineConfig
from burstguard.engine.core import (
    DecodeRun,
    EngineRequest,
    RequestRejected,
    StepResult,
    check_priority,
)
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.core import TICK_S, GatewayCore, GatewayStats
from burstguard.gateway.events import (
    Abandon,
    Arrive,
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
    Tick,
)
from burstguard.gateway.fleet.fleet import Fleet
from burstguard.gateway.metrics import WorkCounts
from burstguard.gateway.request import GatewayRequest
from burstguard.sim.autoscaling import ScalingDriver, discovery_lag_s
from burstguard.sim.heap import EventHeap
from burstguard.sim.loop import RecordBook, SimResult, served_prompt
from burstguard.sim.replicas import ReplicaSet, replica_id
from burstguard.sim.series import SeriesRecorder
from burstguard.workload.spec import Workload

__all__ = ["GatewaySimResult", "gateway_summary", "simulate_gateway"]

# ties at one instant: a step's end, then arrivals, the scrape, the tick
ARRIVAL, SCRAPE, TICK = range(1, 4)  # a step's end is 0 (`sim.replicas.STEP`)


@dataclass
class GatewaySimResult(SimResult):
    """SimResult plus the gateway's own counters (outcomes by class, rejection reasons,
    preemptions) and the tokens prefilled again to resume preempted requests."""

    gateway: GatewayStats | None = None
    reprefill_tokens: int = 0
    routed: dict[str, int] | None = None  # replica -> requests sent to it (failovers incl.)
    scaling: dict[str, Any] | None = None  # `ScalingDriver.summary`, with an autoscaler


def _next_on_grid(t: float, period: float) -> float:
    """The first multiple of `period` at or after `t` (live ticks keep their phase)."""
    return math.ceil(t / period - 1e-9) * period


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
    ) -> None:
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        if replica_profiles is not None and len(replica_profiles) != replicas:
            raise ValueError("replica_profiles: one profile per replica")
        self.workload = workload
        self.config = gateway
        self.heap = EventHeap()
        self.fleet = Fleet(gateway.fleet)
        self.gw = GatewayCore(gateway, self.fleet)
        self.replicas = ReplicaSet(self.heap, engine, profile, self.fleet, self.step_end,
                                   1.0 / gateway.engine_speedup,
                                   self.run_end if fast_forward else None)  # fmt: skip
        for i in range(replicas):
            own = None if replica_profiles is None else replica_profiles[i]
            self.replicas.add_replica(replica_id(i), 0.0, own)
        self.profile = profile
        self.where: dict[str, str] = {}  # request id -> the replica running it
        self.routed: dict[str, int] = {}
        # the engine's series (`server_series`) is the first replica's, as bench scrapes one
        # target; none under an autoscaler, which may drain that replica away
        self.recorder = (
            SeriesRecorder(self.replicas.engine(replica_id(0))) if scaling is None else None
        )
        self.book = RecordBook()
        self.max_tokens: dict[str, int] = {}
        self.reprefill_tokens = 0
        self.tick_s = TICK_S * gateway.engine_speedup
        self.scrape_s = gateway.scrape_interval_s * gateway.engine_speedup
        self._clocked = False  # the tick and scrape are scheduled
        self._generation = 0  # bumped when they stop: a stopped one scheduled before drops
        self.arrivals = 0
        self.work = WorkCounts()  # token counters, as the live gateway's /metrics
        self.scaler = (
            None
            if scaling is None
            else ScalingDriver(self.heap, self.replicas, scaling, replicas, self._signals,
                               self._scaling_active, seed, discovery_lag_s(gateway))
        )  # fmt: skip

    # -- clients -----------------------------------------------------------------------

    def arrive(self, i: int, now: float) -> None:
        spec = self.workload.spec(i)
        self.arrivals += 1
        cls = self.config.class_by_name(spec.priority_class).name
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
        req = GatewayRequest(spec.id, now, spec.prompt_tokens, spec.max_tokens, cls, spec.tenant,
                             prefix_hashes=spec.prefix_hashes)  # fmt: skip
        self.event(Arrive(req), now)

    @staticmethod
    def _answered(rec: RequestRecord, now: float, status: int, error: str) -> None:
        rec.status, rec.error = status, error
        rec.e2e_s = now - rec.scheduled_s  # when the answer reached the client

    # -- the gateway: events in, effects carried out -----------------------------------

    def event(self, event: Event, now: float) -> None:
        for effect in self.gw.handle(event, now):
            self.carry_out(effect, now)

    def carry_out(self, effect: Effect, now: float) -> None:
        if isinstance(effect, Forget):
            self.replicas.forgotten(effect.backend, now)
            return
        rid = effect.req.id
        rec = self.book.records[rid]
        if isinstance(effect, Reject):
            self._answered(rec, now, 429, "rejected")
            rec.retry_after_s = effect.retry_after_s
        elif isinstance(effect, Preempt):
            self.replicas.engine(self.where[rid]).abort(rid, now)
            self.book.resumed_at[rid] = self.book.produced.get(rid, 0)
        elif isinstance(effect, Abandon):  # no replica fails in the simulation
            self._answered(rec, now, 502, effect.outcome)
        else:
            self.release(effect, rec, now)

    def release(self, effect: Release, rec: RequestRecord, now: float) -> None:
        rid = effect.req.id
        assert effect.backend is not None  # the simulation always has a fleet
        self.where[rid] = effect.backend
        self.routed[effect.backend] = self.routed.get(effect.backend, 0) + 1
        engine = self.replicas.engine(effect.backend)
        have = self.book.resumed_at.get(rid, 0) if effect.resumed else 0
        prompt = (rec.prompt_tokens or 0) + have
        if effect.resumed:
            self.reprefill_tokens += prompt
        priority = 0 if effect.priority is None else effect.priority
        try:
            check_priority(engine.config, priority)
            engine.add_request(
                EngineRequest(rid, prompt, self.max_tokens[rid] - have, now, priority), now
            )
        except RequestRejected:  # the backend's 400 passes through to the client
            self._answered(rec, now, 400, "http_400")
            self.work.refused(rec.prompt_tokens or 0)
            self.event(Fail(rid), now)
            return
        self.replicas.kick(effect.backend, now)

    def scrape(self, now: float, gen: int) -> None:
        if self._stopped(gen):
            return
        for url, state in self.replicas.states():
            self.event(Scrape(state, url), now)
        self.heap.at(now + self.scrape_s, SCRAPE, lambda t: self.scrape(t, gen))

    def tick(self, now: float, gen: int) -> None:
        if self._stopped(gen):
            return
        self.event(Tick(), now)
        self.heap.at(now + self.tick_s, TICK, lambda t: self.tick(t, gen))

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
        return self.arrivals < len(self.workload) or not self._idle()

    def _idle(self) -> bool:
        s = self.gw.stats
        return self.replicas.idle and s.in_flight_requests == 0 and not any(s.queue_depth.values())

    # -- the engine replicas -----------------------------------------------------------

    def step_end(self, replica: str, result: StepResult, now: float) -> None:
        events = self.book.apply(result)
        if self.recorder is not None and replica == replica_id(0):
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
        if self.recorder is not None and replica == replica_id(0):
            self.recorder.observe(now, sum(k for _, k, _ in run.tokens), len(run.ends))
        for rid in run.finished:
            self.finish(rid, now)

    def finish(self, rid: str, now: float) -> None:
        produced = self.book.produced.get(rid, 0)
        self.work.completed(self.book.records[rid].prompt_tokens or 0, produced)
        self.event(Finish(rid, produced), now)

    # -- the run -----------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> GatewaySimResult:
        arrivals = self.workload.arrival_s.tolist()
        for i, t in enumerate(arrivals):
            self.heap.at(t, ARRIVAL, partial(self.arrive, i))
        end = self.heap.run(progress)
        n = len(arrivals)
        records = [self.book.records[self.workload.request_id(k)] for k in range(n)]
        return GatewaySimResult(
            records=records,
            preemptions=self.replicas.preemptions,
            steps=self.replicas.steps,
            end_s=end,
            series=None if self.recorder is None else self.recorder.series(end),
            gateway=self.gw.stats,
            reprefill_tokens=self.reprefill_tokens,
            routed=dict(self.routed),
            scaling=None if self.scaler is None else self.scaler.summary(end),
        )


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
) -> GatewaySimResult:
    """Runs `workload` through the gateway policies of `gateway` into `replicas` engine
    replicas behind its router (each of `profile`, or of its own `replica_profiles`), in
    virtual time; every request ends completed, rejected (429) or refused by the engine.
    With `scaling`, its autoscaler adds and drains replicas from `replicas` on (cold starts
    drawn with `seed`). `fast_forward` applies runs of pure decode steps at once (same
    records, computed faster; `sim.replicas`). `progress(virtual now)` is called now and
    then (`EventHeap.run`)."""
    return _GatewaySim(
        workload, engine, profile, gateway, replicas, replica_profiles, scaling, seed,
        fast_forward,
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
    return {
        "config": source,
        "classes": classes,
        "rejections": stats.rejections if stats is not None else {},
        "preemptions": sum(stats.preemptions.values()) if stats is not None else 0,
        "reprefill_tokens": result.reprefill_tokens,
    }
