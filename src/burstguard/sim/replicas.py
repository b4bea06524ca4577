"""The one replica stepper: engine replicas on the event heap, for every mode of the sim.

Each replica is an `EngineCore` (the emulator's engine). Every driver steps its replicas
here: clients straight to one engine (`sim.loop`, open or closed loop, the burst cycle)
and the gateway core in front of a fleet (`sim.gateway_loop`). Behind the gateway each
replica is named by a URL-like id (`http://replica-0`) and published to the core's `Fleet`,
so the core routes to it exactly as it routes to a live backend: the same router, caps and
drain rules. Replicas can be added, drained, killed and stalled while the run goes on:

- `add_replica(replica_id, now, profile=None)`: the replica starts (empty) and is routable
  from `now` (`profile`: its hardware, default the run's).
- `drain_replica(replica_id, now, on_drained)`: the fleet sends it no new request; the
  requests it holds run to their end; when its last one has finished (at once if it holds
  none) it is removed and `on_drained(t)` is called with that time.
- `replicas` (active ids), `draining` (ids still finishing), `engine(replica_id)`.

The driver owns the heap; this entity owns the engines, starts their steps (`kick`) and
hands each step's result to `on_step` (a fast-forwarded run's to `on_run`).

Decode fast-forward: when a replica's next steps are pure decodes, it plans them
(`EngineCore.plan_decodes`) and schedules one event at the last one's end instead of one
per step. How far it plans is the driver's `FastForward`:

- behind the gateway (`FLEET`), other replicas and the gateway's ticks keep running in
  between, so a plan is optimistic: up to the first step that finishes a request (the
  gateway hears of every finish on time), and whatever touches the replica before it ends
  (a request released to it, an abort, a scrape of its gauges: every access goes through
  `engine()`, `add_request()` or `states()`) first settles it at that instant: the steps
  that have ended are applied and the one under way becomes an ordinary step in flight,
  exactly as if it had stepped one at a time all along;
- straight to one engine (`DIRECT`, `CLOSED`), only the driver's own arrivals touch it, so
  a plan takes the steps that begin before the heap's next event and is never cut: an
  arrival during its last step just waits in the queue, as it would for a step in flight.
  Closed-loop clients send their next request when one finishes, so their plans also end
  at the first finish.

tests/unit/test_sim_fleet_fast_forward.py, test_sim_engine.py and test_sim_closed.py
compare the records with stepping one at a time.
"""

from __future__ import annotations

import enum
import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import DecodeRun, EngineCore, EngineRequest, StepResult
from burstguard.core.engine.profile import Profile
from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.state import BackendState
from burstguard.sim.heap import EventHeap

STEP = 0  # the heap's tie rank of a step's end (first at one instant)

MAX_RUN_STEPS = 32  # a fleet plan's length: longer ones are mostly cut short by a release

OnStep = Callable[[str, StepResult, float], None]
OnRun = Callable[[str, DecodeRun, float], None]
OnDrained = Callable[[float], None]


def _ignore_step(replica: str, result: StepResult, now: float) -> None:
    """A detached set's step handler (`ReplicaSet.detach`)."""


@dataclass(frozen=True, slots=True)
class FastForward:
    """How far a replica plans a run of decode steps ahead (see the module doc)."""

    to_next_event: bool  # only steps that begin before the heap's next event (never cut)
    to_first_finish: bool  # none after the first step that finishes a request
    max_steps: int | None = None


FLEET = FastForward(to_next_event=False, to_first_finish=True, max_steps=MAX_RUN_STEPS)
DIRECT = FastForward(to_next_event=True, to_first_finish=False)  # open loop, one engine
CLOSED = FastForward(to_next_event=True, to_first_finish=True)  # a finish sends a request


def replica_id(i: int) -> str:
    """The id of the i-th replica a simulation starts with."""
    return f"http://replica-{i}"


class Health(enum.Enum):
    """What a replica's process is doing (`sim.faults`)."""

    UP = "up"
    DOWN = "down"  # killed: its connections reset, new ones are refused
    STALLED = "stalled"  # alive, but it steps no more: connections stay open, silent


@dataclass(slots=True, eq=False)
class _Replica:
    id: str
    engine: EngineCore
    on_drained: OnDrained | None = None
    draining: bool = False
    run: list[float] | None = None  # the step ends of a planned decode run, not applied yet
    run_start: float = 0.0
    begin_pending: bool = False  # a BEGIN event is on the heap (`begin_rank`)
    health: Health = Health.UP
    step_end: Callable[[float], None] = field(init=False)  # its step-end handler (`_new`)


class ReplicaSet:
    """Engine replicas, added and drained at run time; with a `fleet`, it routes over them."""

    def __init__(
        self,
        heap: EventHeap,
        engine: EngineConfig,
        profile: Profile,
        on_step: OnStep,
        on_run: OnRun | None = None,
        fast_forward: FastForward = FLEET,
        fleet: Fleet | None = None,
        fleet_scale: float = 1.0,
        begin_rank: int | None = None,
    ) -> None:
        """`on_run`: gets fast-forwarded decode runs (None: every step one at a time);
        `fleet`: the gateway's, told of every membership change; `fleet_scale`: its clock
        per second of simulated (engine) time; `begin_rank`: a step that would begin while
        other events are due at the same instant begins after them, at this tie rank (a
        direct engine takes that instant's arrivals into its next step; None: at once)."""
        self._heap = heap
        self._engine_cfg = engine
        self.engine_config = engine
        self.profile = profile
        self._fleet = fleet
        self._on_step = on_step
        self._on_run = on_run
        self._ff = fast_forward
        self._scale = fleet_scale
        self._begin_rank = begin_rank
        self._replicas: dict[str, _Replica] = {}
        self.steps = 0
        self.preemptions_of_removed = 0  # engine preemptions of replicas already gone
        self._prefix_of_removed = (0, 0)  # ... and their prefix-cache (queried, hit) tokens

    # -- the API an autoscaler drives ---------------------------------------------------

    @property
    def replicas(self) -> tuple[str, ...]:
        """Active (routable) replicas."""
        return tuple(u for u, r in self._replicas.items() if not r.draining)

    @property
    def draining(self) -> tuple[str, ...]:
        return tuple(u for u, r in self._replicas.items() if r.draining)

    def add_replica(self, replica_id: str, now: float, profile: Profile | None = None) -> None:
        """Starts an empty replica (of `profile`, default the run's); routable from `now`.
        Re-adding a draining one keeps it."""
        r = self._replicas.get(replica_id)
        if r is not None and not r.draining:
            raise ValueError(f"replica {replica_id!r} is already active")
        if r is None:
            self._new(replica_id, profile or self.profile)
        else:
            r.draining, r.on_drained = False, None
        self._publish(now)

    def drain_replica(
        self, replica_id: str, now: float, on_drained: OnDrained | None = None
    ) -> None:
        """No new request from `now`; `on_drained(t)` when its last request has finished."""
        r = self._replicas.get(replica_id)
        if r is None or r.draining:
            raise ValueError(f"replica {replica_id!r} is not active")
        r.draining, r.on_drained = True, on_drained
        removed = self._publish(now)
        if replica_id in removed:
            self.forgotten(replica_id, now)

    def _new(self, replica_id: str, profile: Profile) -> _Replica:
        r = _Replica(replica_id, EngineCore(self._engine_cfg, profile))
        r.step_end = partial(self._step_end, r)
        self._replicas[replica_id] = r
        return r

    # -- faults (`sim.faults`): the driver tells the gateway what they mean ---------------

    def health(self, replica_id: str) -> Health:
        return self._replicas[replica_id].health

    def kill(self, replica_id: str, now: float) -> list[str]:
        """The replica's process dies at `now` (its step under way is lost); returns the
        requests it held, which its driver fails."""
        r = self._replicas[replica_id]
        self._settle(replica_id, r, now)
        r.health = Health.DOWN
        return list(r.engine.requests)

    def stall(self, replica_id: str, now: float) -> list[str]:
        """The replica steps no more from `now` (its step under way never ends); returns
        the requests it holds, which wait, as will what is sent to it."""
        r = self._replicas[replica_id]
        self._settle(replica_id, r, now)
        r.health = Health.STALLED
        return list(r.engine.requests)

    def stalled_engine(self, replica_id: str) -> EngineCore | None:
        """The engine of a replica that is stalled now (None: up, down or gone)."""
        r = self._replicas.get(replica_id)
        return r.engine if r is not None and r.health is Health.STALLED else None

    def restart(self, replica_id: str) -> list[str]:
        """The replica starts again, empty (a fresh engine of the same profile); returns
        the requests its stalled process still held (their connections now reset)."""
        old = self._replicas[replica_id]
        held = [] if old.health is Health.DOWN else list(old.engine.requests)
        self._retire(old.engine)
        new = self._new(replica_id, old.engine.profile)
        new.draining, new.on_drained = old.draining, old.on_drained
        return held

    def engine(self, replica_id: str) -> EngineCore:
        """The replica's engine, settled at the heap's current time (see the module doc)."""
        r = self._replicas[replica_id]
        self._settle(replica_id, r, self._heap.now)
        return r.engine

    def add_request(self, replica_id: str, req: EngineRequest, now: float) -> None:
        """Queues `req` on the replica (raises `RequestRejected` as the engine does). A
        planned run whose steps have all begun is left alone: the request waits for its
        end, as it would wait for a step in flight."""
        r = self._replicas[replica_id]
        ends = r.run
        if ends is not None and (ends[-2] if len(ends) > 1 else r.run_start) >= now:
            self._settle(replica_id, r, now)
        r.engine.add_request(req, now)

    # -- the simulation's side ----------------------------------------------------------

    def _publish(self, now: float) -> tuple[str, ...]:
        if self._fleet is None:
            return ()
        change = self._fleet.set_backends(self.replicas, now * self._scale)
        return change.removed

    def forgotten(self, replica_id: str, now: float) -> None:
        """The fleet forgot a drained replica (the core's `Forget`): remove it."""
        r = self._replicas.pop(replica_id, None)
        if r is None:
            return
        self._retire(r.engine)
        if r.on_drained is not None:
            r.on_drained(now)

    def _retire(self, engine: EngineCore) -> None:
        """Keeps the counters of an engine that is gone (removed, or replaced at a restart)."""
        stats = engine.stats
        self.preemptions_of_removed += stats.num_preemptions_total
        queried, hit = self._prefix_of_removed
        self._prefix_of_removed = (
            queried + stats.prefix_cache_queries_total,
            hit + stats.prefix_cache_hits_total,
        )

    def states(self) -> list[tuple[str, BackendState]]:
        """Each replica's gauges, as its /metrics would show them."""
        out = []
        for url, r in self._replicas.items():
            if r.health is not Health.UP:
                continue  # its scrape fails: the gateway's last state of it ages
            self._settle(url, r, self._heap.now)
            s = r.engine.stats
            out.append((url, BackendState(s.num_waiting, s.num_running, s.kv_cache_usage)))
        return out

    @property
    def idle(self) -> bool:
        return all(
            not r.engine.step_in_flight and not r.engine.has_unfinished  # (so has a planned run)
            for r in self._replicas.values()
            if r.health is Health.UP  # what a failed one holds, the gateway counts in flight
        )

    def detach(self) -> None:
        """The run is over: drops the handlers into the simulation that owns this set. They
        held the two in a reference cycle, and what a run leaves alive is in the oldest GC
        generation (`EventHeap.run`): the simulation's per-request tables would wait for a
        full collection instead of going with it (a `tune` worker runs one after another)."""
        self._on_step = _ignore_step
        self._on_run = None

    @property
    def preemptions(self) -> int:
        live = sum(r.engine.stats.num_preemptions_total for r in self._replicas.values())
        return live + self.preemptions_of_removed

    @property
    def prefix_cache(self) -> tuple[int, int]:
        """Prompt tokens looked up in the replicas' prefix caches, and found there."""
        queried, hit = self._prefix_of_removed
        for r in self._replicas.values():
            s = r.engine.stats
            queried, hit = queried + s.prefix_cache_queries_total, hit + s.prefix_cache_hits_total
        return queried, hit

    def kick(self, replica_id: str, now: float) -> None:
        """Starts the replica's next step (or decode run) if none runs and it has work."""
        r = self._replicas.get(replica_id)
        if r is None or r.engine.step_in_flight or r.run is not None or r.begin_pending:
            return
        if r.health is not Health.UP:
            return
        if self._begin_rank is not None and self._heap.next_time() <= now:
            r.begin_pending = True  # after this instant's other events
            self._heap.at(now, self._begin_rank, partial(self._begin, replica_id))
            return
        self._start(replica_id, r, now)

    def _begin(self, replica_id: str, now: float) -> None:
        r = self._replicas.get(replica_id)
        if r is None:
            return
        r.begin_pending = False
        if not (r.engine.step_in_flight or r.run is not None or r.health is not Health.UP):
            self._start(replica_id, r, now)

    def _start(self, replica_id: str, r: _Replica, now: float) -> None:
        if self._on_run is not None:
            ff = self._ff
            until = self._heap.next_time() if ff.to_next_event else math.inf
            ends = r.engine.plan_decodes(now, until, ff.max_steps, ff.to_first_finish)
            if len(ends) > 1:
                r.run, r.run_start = ends, now
                self._heap.at(ends[-1], STEP, partial(self._run_end, r, ends))
                return
        end = r.engine.begin_step(now)
        if end is not None:
            self._heap.at(end, STEP, r.step_end)

    def _gone(self, r: _Replica) -> bool:
        """True for a replica removed (its last request preempted away mid-step),
        restarted (a new one took its place) or failed: its pending step never ends."""
        return self._replicas.get(r.id) is not r or r.health is not Health.UP

    def _step_end(self, r: _Replica, now: float) -> None:
        if self._gone(r):
            return
        result = r.engine.end_step()
        self.steps += 1
        self._on_step(r.id, result, now)
        self.kick(r.id, now)

    def _run_end(self, r: _Replica, ends: list[float], now: float) -> None:
        if self._gone(r) or r.run is not ends:  # settled (cut short) before its end
            return
        r.run = None
        self._apply_run(r.id, r, ends)
        self.kick(r.id, now)

    def _apply_run(self, replica_id: str, r: _Replica, ends: list[float]) -> None:
        run = r.engine.apply_decodes(ends)
        assert run is not None and self._on_run is not None
        self.steps += len(ends)
        self._on_run(replica_id, run, ends[-1])

    def _settle(self, replica_id: str, r: _Replica, now: float) -> None:
        """Cuts a planned run short at `now`: its steps that ended by then are applied,
        the one under way is begun as an ordinary step (same shape, same end). Nothing is
        planned afterwards, so the caller may change the engine."""
        while (ends := r.run) is not None:
            r.run = None
            done = bisect_right(ends, now)
            if done:  # a finish among them reaches the gateway, which may start the next
                self._apply_run(replica_id, r, ends[:done])
            if r.run is not None or r.engine.step_in_flight:
                continue  # a run planned meanwhile is settled in turn (at its start)
            if done == len(ends):  # it ended at this very instant: the next step begins
                end = r.engine.begin_step(now)
                if end is None:
                    return
            else:
                end = r.engine.begin_step(ends[done - 1] if done else r.run_start)
                assert end == ends[done], "a settled step must end where the plan said"
            self._heap.at(end, STEP, r.step_end)
