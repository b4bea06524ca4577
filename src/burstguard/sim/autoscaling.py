"""The autoscaler on the simulator's event heap: one `ScalingController` (policy + fleet
state machine, `burstguard.core.scaling`) driving the gateway simulation's `ReplicaSet`.

The controller decides and keeps the books (replicas series, replica-seconds, scale
events); this entity only carries its effects out in virtual time: a replica that the
fleet reports ready is added to the `ReplicaSet` (routable from then on), one it drains
is drained there and reported back when its last request has finished, each once the
gateway's discovery would have seen the change (`discovery_lag_s`: the live gateway
re-reads its backend file or DNS name on a timer). Signals are what
the live gateway exports at that instant (`llm_request_queue_depth`,
`burstguard_in_flight_requests`, `burstguard_arrivals_total`, `llm_request_total`).
It also samples the gateway's queue and the policy's gauges once a second for the report.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.scaling import (
    DrainReplica,
    FleetEffect,
    ReplicaReady,
    ScalingController,
    ScalingPolicy,
    Signals,
    StopReplica,
)
from burstguard.core.scaling.prior import ProfilePrior
from burstguard.sim.heap import EventHeap
from burstguard.sim.replicas import ReplicaSet, replica_id


def discovery_lag_s(config: GatewayConfig) -> float:
    """Engine seconds from a replica's listing (or unlisting) to the gateway's router
    seeing it: on average half the discovery source's check interval (wall seconds, so x
    `engine_speedup`): the file's (`burstguard fleet`), else the DNS name's (Kubernetes),
    else none (a static list, or the simulator's own replicas)."""
    d = config.fleet.discovery
    source = d.file or d.dns
    return 0.0 if source is None else source.interval_s / 2 * config.engine_speedup


AUTOSCALE = 4  # tie rank: after a step's end (0), arrivals (1), the scrape (2) and tick (3)
SAMPLE_S = 1.0


def _no_signals() -> Signals:
    return {}


def _inactive() -> bool:
    return False


class ScalingDriver:
    """Runs `policy` over `replicas` from `initial` ready ones; stops when `active()` is
    false (the workload is over and everything has finished)."""

    def __init__(
        self,
        heap: EventHeap,
        replicas: ReplicaSet,
        policy: ScalingPolicy,
        initial: int,
        signals: Callable[[], Signals],
        active: Callable[[], bool],
        seed: int = 0,
        discovery_lag_s: float = 0.0,
    ) -> None:
        """`discovery_lag_s`: how long after the fleet's event the gateway's router takes
        a ready replica in, or stops sending work to a draining one."""
        self.heap = heap
        self.discovery_lag_s = discovery_lag_s
        self.replicas = replicas
        self.policy = policy
        # a predictive policy's capacity prior: the replicas' own engine profile
        prior = ProfilePrior(replicas.engine_config, replicas.profile)
        self.controller: ScalingController = policy.build_controller(
            initial_replicas=initial, seed=seed, start=0.0, prior=prior
        )
        self._signals = signals
        self._active = active
        self.queue_series: list[tuple[float, float]] = []
        self.gauge_series: list[tuple[float, dict[str, float]]] = []  # the policy's figures
        self._due = math.inf  # the controller's event already on the heap
        self._sampling = False
        self.schedule(0.0)

    def schedule(self, now: float) -> None:
        """Puts the controller's next event (and the next queue sample) on the heap."""
        t = self.controller.next_event_at()
        if t < self._due:
            self._due = max(t, now)
            self.heap.at(self._due, AUTOSCALE, self._fire)
        if not self._sampling:
            self._sampling = True
            self.heap.at(math.floor(now / SAMPLE_S) * SAMPLE_S + SAMPLE_S, AUTOSCALE, self._sample)

    def detach(self) -> None:
        """The run is over: drops the callbacks into the simulation that owns this driver
        (a reference cycle; `ReplicaSet.detach`). It schedules nothing after."""
        self._signals = _no_signals
        self._active = _inactive

    def _fire(self, now: float) -> None:
        if now != self._due:
            return  # superseded by an earlier one
        self._due = math.inf
        self.carry_out(self.controller.advance(now, self._signals()), now)
        if self._active():
            self.schedule(now)

    def _sample(self, now: float) -> None:
        s = self._signals()
        self.queue_series.append((now, s["llm_request_queue_depth"]))
        self.gauge_series.append((now, dict(self.controller.policy.gauges)))
        self._sampling = False
        if self._active():
            self.schedule(now)

    def carry_out(self, effects: list[FleetEffect], now: float) -> None:
        for e in effects:
            if isinstance(e, ReplicaReady | DrainReplica):
                if self.discovery_lag_s == 0:
                    self._route(e, now)
                else:
                    route = functools.partial(self._route, e)
                    self.heap.at(now + self.discovery_lag_s, AUTOSCALE, route)
            elif isinstance(e, StopReplica) and e.reason == "drain_timeout":
                pass  # the ReplicaSet lets its requests finish; the fleet stopped paying
        # StartReplica: nothing to do until the fleet says it is ready (its cold start)

    def _route(self, e: ReplicaReady | DrainReplica, now: float) -> None:
        """The router takes a ready replica in, or sends a draining one no more work."""
        if isinstance(e, ReplicaReady):
            self.replicas.add_replica(replica_id(e.replica_id), now)
        else:
            self.replicas.drain_replica(
                replica_id(e.replica_id), now, functools.partial(self._drained, e.replica_id)
            )

    def _drained(self, rid: int, now: float) -> None:
        self.carry_out(self.controller.drained(rid, now), now)

    def summary(self, end_s: float) -> dict[str, Any]:
        """`replica_seconds`, the replicas series, the scale events, the queue samples
        and the policy's figures (`gauges`: learned capacity, forecast...) at each."""
        names = list(self.gauge_series[0][1]) if self.gauge_series else []
        return {
            **self.controller.report(end_s),
            "queue_depth": {
                "t": [t for t, _ in self.queue_series],
                "value": [v for _, v in self.queue_series],
            },
            "gauges": {
                "t": [t for t, _ in self.gauge_series],
                **{n: [g.get(n, 0.0) for _, g in self.gauge_series] for n in names},
            },
        }
