"""The replicas an autoscaler sizes, as a pure state machine: starting, ready, draining.

(Not the gateway's `core.fleet.Fleet`, the backends it routes to: this pool is the
deployment's replicas over their lifetime; "drain" here means a replica taken out of the
deployment that finishes its work, there a backend the router stops choosing.)

An autoscaler decides a desired count; `ReplicaPool.scale_to` turns that into effects the
driver carries out (start a replica that serves at `ready_at`, drain one, stop one). The
simulator schedules `ready_at` and drain ends on its event heap; a live driver starts real
processes and calls `mark_ready` / `drained` when they report. Either way the books
(counts over time, replica-seconds, scale events) are kept here, so sim and live report
the same things. Nothing here reads a clock.

Scale-down follows Kubernetes' ReplicaSet order: replicas not yet ready go first (they
are stopped at once: nothing to drain), then the most recently ready; a ready replica
drains (takes no new work, finishes what it has) until `drained` or its grace period ends.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from burstguard.core.scaling.cold_start import ColdStartModel

__all__ = [
    "DrainReplica",
    "FleetCounts",
    "FleetEffect",
    "FleetSample",
    "ReplicaPool",
    "ReplicaReady",
    "StartReplica",
    "StopReplica",
    "count_reversals",
]

State = Literal["starting", "ready", "draining"]


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """How many replicas are in each state; `current` is what Kubernetes counts as pods."""

    starting: int
    ready: int
    draining: int

    @property
    def current(self) -> int:
        """Replicas that exist and are not terminating (HPA's currentReplicas)."""
        return self.starting + self.ready


@dataclass(frozen=True, slots=True)
class FleetSample:
    """One point of the replicas series: the counts from `time` on."""

    time: float
    desired: int
    starting: int
    ready: int
    draining: int


@dataclass(frozen=True, slots=True)
class StartReplica:
    """Start a replica; with the modelled cold start it serves from `ready_at`."""

    replica_id: int
    ready_at: float


@dataclass(frozen=True, slots=True)
class ReplicaReady:
    """The replica serves from now: route to it."""

    replica_id: int


@dataclass(frozen=True, slots=True)
class DrainReplica:
    """Send the replica no new work; call `ReplicaPool.drained` when its last request ends."""

    replica_id: int
    deadline: float


@dataclass(frozen=True, slots=True)
class StopReplica:
    """The replica is gone (`cancelled` while starting, `drained`, or `drain_timeout`)."""

    replica_id: int
    reason: Literal["cancelled", "drained", "drain_timeout"]


FleetEffect = StartReplica | ReplicaReady | DrainReplica | StopReplica


@dataclass(slots=True)
class _Replica:
    id: int
    state: State
    since: float
    until: float  # ready_at while starting, drain deadline while draining, inf when ready


class ReplicaPool:
    """Replicas by state, with the books a summary needs (series, replica-seconds)."""

    def __init__(
        self,
        cold_start: ColdStartModel,
        *,
        initial_ready: int = 0,
        drain_timeout_s: float = 30.0,
        seed: int = 0,
        now: float = 0.0,
        auto_ready: bool = True,
    ) -> None:
        """`auto_ready` False: only `mark_ready` (a real health check) makes a replica
        ready; the modelled `ready_at` is then only a prediction."""
        if initial_ready < 0 or drain_timeout_s < 0:
            raise ValueError("initial_ready and drain_timeout_s must be >= 0")
        self.cold_start = cold_start
        self.drain_timeout_s = drain_timeout_s
        self.auto_ready = auto_ready
        self._rng = random.Random(seed)
        self._replicas: dict[int, _Replica] = {}
        self._next_id = 0
        self._desired = initial_ready
        self._last_t = now
        self._replica_seconds = 0.0
        self.history: list[FleetSample] = []
        for _ in range(initial_ready):
            self._add(_Replica(self._new_id(), "ready", now, math.inf))
        self._record(now)

    # -- queries ----------------------------------------------------------------------

    @property
    def desired(self) -> int:
        return self._desired

    def counts(self) -> FleetCounts:
        c = {"starting": 0, "ready": 0, "draining": 0}
        for r in self._replicas.values():
            c[r.state] += 1
        return FleetCounts(c["starting"], c["ready"], c["draining"])

    def ids(self, state: State) -> list[int]:
        """The ids of the replicas in `state`, in order."""
        return sorted(r.id for r in self._replicas.values() if r.state == state)

    def next_event_at(self) -> float:
        """When `advance` next has something to do (a replica ready, a drain timing out)."""
        return min((r.until for r in self._pending()), default=math.inf)

    def _pending(self) -> list[_Replica]:
        """Replicas `advance` acts on at their `until`."""
        return [r for r in self._replicas.values() if self.auto_ready or r.state == "draining"]

    def replica_seconds(self, now: float) -> float:
        """Replica-seconds so far: every replica costs from its order until it stops."""
        return self._replica_seconds + len(self._replicas) * max(now - self._last_t, 0.0)

    # -- events -----------------------------------------------------------------------

    def scale_to(self, desired: int, now: float) -> list[FleetEffect]:
        """Start or remove replicas so that starting + ready == desired."""
        if desired < 0:
            raise ValueError(f"desired replicas must be >= 0, got {desired}")
        self._account(now)
        self._desired = desired
        effects: list[FleetEffect] = []
        live = [r for r in self._replicas.values() if r.state != "draining"]
        for _ in range(desired - len(live)):
            ready_at = now + self.cold_start.sample(self._rng)
            r = _Replica(self._new_id(), "starting", now, ready_at)
            self._add(r)
            effects.append(StartReplica(r.id, ready_at))
        if desired < len(live):
            # not ready first (furthest from ready first), then the most recently ready
            live.sort(
                key=lambda r: (r.state == "ready", -r.until if r.state == "starting" else -r.since)
            )
            for r in live[: len(live) - desired]:
                if r.state == "starting":
                    del self._replicas[r.id]
                    effects.append(StopReplica(r.id, "cancelled"))
                else:
                    r.state, r.since, r.until = "draining", now, now + self.drain_timeout_s
                    effects.append(DrainReplica(r.id, r.until))
        self._record(now)
        return effects

    def advance(self, now: float) -> list[FleetEffect]:
        """Replicas whose cold start ended become ready; drains past their grace stop."""
        effects: list[FleetEffect] = []
        for r in sorted(self._pending(), key=lambda r: (r.until, r.id)):
            if r.until > now:
                break
            if r.state == "starting":
                effects += self.mark_ready(r.id, max(r.until, self._last_t))
            elif r.state == "draining":
                self._account(r.until)
                del self._replicas[r.id]
                effects.append(StopReplica(r.id, "drain_timeout"))
                self._record(r.until)
        self._account(now)
        return effects

    def mark_ready(self, replica_id: int, now: float) -> list[FleetEffect]:
        """A starting replica serves from `now` (live: its health check passed)."""
        r = self._replicas.get(replica_id)
        if r is None or r.state != "starting":
            return []
        self._account(now)
        r.state, r.since, r.until = "ready", now, math.inf
        self._record(now)
        return [ReplicaReady(r.id)]

    def drained(self, replica_id: int, now: float) -> list[FleetEffect]:
        """A draining replica finished its last request: it stops now."""
        r = self._replicas.get(replica_id)
        if r is None or r.state != "draining":
            return []
        self._account(now)
        del self._replicas[replica_id]
        self._record(now)
        return [StopReplica(replica_id, "drained")]

    # -- books ------------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _add(self, r: _Replica) -> None:
        self._replicas[r.id] = r

    def _account(self, now: float) -> None:
        if now > self._last_t:
            self._replica_seconds += len(self._replicas) * (now - self._last_t)
            self._last_t = now

    def _record(self, now: float) -> None:
        c = self.counts()
        s = FleetSample(now, self._desired, c.starting, c.ready, c.draining)
        if self.history and self.history[-1].time == now:
            self.history[-1] = s
        elif not self.history or _counts_of(self.history[-1]) != _counts_of(s):
            self.history.append(s)


def _counts_of(s: FleetSample) -> tuple[int, int, int, int]:
    return (s.desired, s.starting, s.ready, s.draining)


def count_reversals(values: list[int]) -> int:
    """How often a series changes direction (up then down, or down then up): flaps."""
    reversals, last_dir, prev = 0, 0, None
    for v in values:
        if prev is not None and v != prev:
            d = 1 if v > prev else -1
            if last_dir and d != last_dir:
                reversals += 1
            last_dir = d
        prev = v
    return reversals
