"""The simulated fleet: engine replicas on the event heap behind one gateway core.

Each replica is an `EngineCore` (the emulator's engine) named by a URL-like id
(`http://replica-0`), so the gateway core's `Fleet` routes to it exactly as it routes to a
live backend: the same router, caps and drain rules. Replicas can be added and removed
while the simulation runs (an autoscaler's decisions):

- `add_replica(replica_id, now, profile=None)`: the replica starts (empty) and is routable
  from `now` (`profile`: its hardware, default the run's).
- `drain_replica(replica_id, now, on_drained)`: the fleet sends it no new request; the
  requests it holds run to their end; when its last one has finished (at once if it holds
  none) it is removed and `on_drained(t)` is called with that time.
- `replicas` (active ids), `draining` (ids still finishing), `engine(replica_id)`.

The gateway simulation (`sim.gateway_loop`) owns the heap and the core; this entity owns
the engines, starts their steps (`kick`) and hands each step's result to `on_step`.

Decode fast-forward (as in the single-engine loop, `sim.loop`): when a replica's next
steps are pure decodes, it plans them up to the first one that finishes a request
(`EngineCore.plan_decodes`) and schedules one event at that step's end instead of one per
step; `on_run` gets them applied at once. Other replicas and the gateway keep running in
between, so a plan is optimistic: whatever touches the replica before it ends (a request
released to it, an abort, a scrape of its gauges: every access goes through `engine()` or
`states()`) first settles it at that instant: the steps that have ended are applied and
the one under way becomes an ordinary step in flight, exactly as if it had stepped one at
a time all along (tests/unit/test_sim_fleet_fast_forward.py compares the records).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from burstguard.engine.config import EngineConfig
from burstguard.engine.core import DecodeRun, EngineCore, StepResult
from burstguard.engine.profile import Profile
from burstguard.gateway.fleet.fleet import Fleet
from burstguard.gateway.request import BackendState
from burstguard.sim.heap import EventHeap

STEP = 0  # the heap's tie rank of a step's end (first at one instant)

MAX_RUN_STEPS = 32  # a plan's length: longer ones are mostly cut short by a release anyway

OnStep = Callable[[str, StepResult, float], None]
OnRun = Callable[[str, DecodeRun, float], None]
OnDrained = Callable[[float], None]


def replica_id(i: int) -> str:
    """The id of the i-th replica a simulation starts with."""
    return f"http://replica-{i}"


@dataclass(slots=True)
class _Replica:
    engine: EngineCore
    on_drained: OnDrained | None = None
    draining: bool = False
    run: list[float] | None = None  # the step ends of a planned decode run, not applied yet
    run_start: float = 0.0


class ReplicaSet:
    """Engine replicas, added and drained at run time; the fleet routes over them."""

    def __init__(
        self,
        heap: EventHeap,
        engine: EngineConfig,
        profile: Profile,
        fleet: Fleet,
        on_step: OnStep,
        fleet_scale: float = 1.0,
        on_run: OnRun | None = None,
    ) -> None:
        """`fleet_scale`: the fleet's clock per second of simulated (engine) time;
        `on_run`: gets fast-forwarded decode runs (None: every step one at a time)."""
        self._heap = heap
        self._engine_cfg = engine
        self.engine_config = engine
        self.profile = profile
        self._fleet = fleet
        self._on_step = on_step
        self._on_run = on_run
        self._scale = fleet_scale
        self._replicas: dict[str, _Replica] = {}
        self.steps = 0
        self.preemptions_of_removed = 0  # engine preemptions of replicas already gone

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
            engine = EngineCore(self._engine_cfg, profile or self.profile)
            self._replicas[replica_id] = _Replica(engine)
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

    def engine(self, replica_id: str) -> EngineCore:
        """The replica's engine, settled at the heap's current time (see the module doc)."""
        r = self._replicas[replica_id]
        self._settle(replica_id, r, self._heap.now)
        return r.engine

    # -- the simulation's side ----------------------------------------------------------

    def _publish(self, now: float) -> tuple[str, ...]:
        change = self._fleet.set_backends(self.replicas, now * self._scale)
        return change.removed

    def forgotten(self, replica_id: str, now: float) -> None:
        """The fleet forgot a drained replica (the core's `Forget`): remove it."""
        r = self._replicas.pop(replica_id, None)
        if r is None:
            return
        self.preemptions_of_removed += r.engine.stats.num_preemptions_total
        if r.on_drained is not None:
            r.on_drained(now)

    def states(self) -> list[tuple[str, BackendState]]:
        """Each replica's gauges, as its /metrics would show them."""
        out = []
        for url, r in self._replicas.items():
            self._settle(url, r, self._heap.now)
            s = r.engine.stats
            out.append((url, BackendState(s.num_waiting, s.num_running, s.kv_cache_usage)))
        return out

    @property
    def idle(self) -> bool:
        return all(
            not r.engine.step_in_flight and not r.engine.has_unfinished  # (so has a planned run)
            for r in self._replicas.values()
        )

    @property
    def preemptions(self) -> int:
        live = sum(r.engine.stats.num_preemptions_total for r in self._replicas.values())
        return live + self.preemptions_of_removed

    def kick(self, replica_id: str, now: float) -> None:
        """Starts the replica's next step (or decode run) if none runs and it has work."""
        r = self._replicas.get(replica_id)
        if r is None or r.engine.step_in_flight or r.run is not None:
            return
        if self._on_run is not None:
            ends = r.engine.plan_decodes(now, math.inf, MAX_RUN_STEPS, to_first_finish=True)
            if len(ends) > 1:
                r.run, r.run_start = ends, now
                self._heap.at(ends[-1], STEP, lambda t: self._run_end(replica_id, ends, t))
                return
        end = r.engine.begin_step(now)
        if end is not None:
            self._heap.at(end, STEP, lambda t: self._step_end(replica_id, t))

    def _step_end(self, replica_id: str, now: float) -> None:
        r = self._replicas.get(replica_id)
        if r is None:  # removed mid-step (its last request was preempted away)
            return
        result = r.engine.end_step()
        self.steps += 1
        self._on_step(replica_id, result, now)
        self.kick(replica_id, now)

    def _run_end(self, replica_id: str, ends: list[float], now: float) -> None:
        r = self._replicas.get(replica_id)
        if r is None or r.run is not ends:  # settled (cut short) before its end
            return
        r.run = None
        self._apply_run(replica_id, r, ends)
        self.kick(replica_id, now)

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
            self._heap.at(end, STEP, lambda t: self._step_end(replica_id, t))
