"""The scaling core on the real clock: an asyncio loop that advances a `ScalingController`
when it is due, and the Prometheus gauges of its decision.

Used by the live gateway (its `autoscaler:` section: the policy decides, the fleet is the
model's, and `burstguard_desired_replicas` carries the decision to KEDA) and by the local
fleet (`burstguard fleet`, which carries the effects out on real emulator processes).
The clock is the caller's: engine seconds (wall x speedup) in both, as in the simulator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from burstguard.core.scaling.controller import ScalingController
from burstguard.core.scaling.export import DESIRED_REPLICAS_METRIC
from burstguard.core.scaling.policy import Signals
from burstguard.core.scaling.replica_pool import FleetEffect

__all__ = ["LiveScaler", "ScalingCollector", "aligned"]

log = logging.getLogger("burstguard.core.scaling")

MAX_SLEEP_S = 1.0  # wall seconds: a stop or a clock jump is noticed within this
ALIGN_S = 0.05
"""Wall seconds: a step this close to its due time is taken at the due time, as Prometheus
aligns a scrape's timestamp to its schedule (`--scrape.timestamp-tolerance`), so a timer's
lateness on a busy machine does not reach the policy (a rate over a 2 s bin read 2.004 s
late is 0.2% off: enough to cross a replica threshold the simulator's exact bin sits on)."""


def aligned(now: float, due: float, speedup: float) -> float:
    """`due` when `now` (engine seconds, as `due`) is at most `ALIGN_S` of wall time
    past it: an event handled that close to its time happened at its time."""
    return due if 0.0 <= now - due <= ALIGN_S * speedup else now


class LiveScaler:
    """Advances `controller` at its due times on `clock`, with `signals()` read then, and
    hands each batch of effects to `on_effects(effects, now)`."""

    def __init__(
        self,
        controller: ScalingController,
        clock: Callable[[], float],
        signals: Callable[[], Signals],
        on_effects: Callable[[list[FleetEffect], float], None] = lambda e, t: None,
        speedup: float = 1.0,
    ) -> None:
        self.controller = controller
        self._clock = clock
        self._signals = signals
        self._on_effects = on_effects
        self._speedup = speedup

    def step(self, now: float | None = None) -> list[FleetEffect]:
        """Advances the controller to `now` (default: the clock's now), with the signals
        read now (what the loop calls; tests call it directly)."""
        now = self._clock() if now is None else now
        effects = self.controller.advance(now, self._signals())
        if effects:
            self._on_effects(effects, now)
        return effects

    async def run(self, refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        """Until cancelled: each step at the controller's due time on the clock (engine
        seconds, so the same times at any speedup), after `refresh()` has fetched the
        signals (a scrape), at the due time (`ALIGN_S`) or, later than that, at the time
        the fetch began; an exception is logged, never fatal."""
        while True:
            wait = (self.controller.next_event_at() - self._clock()) / self._speedup
            await asyncio.sleep(min(max(wait, 0.0), MAX_SLEEP_S))
            now, due = self._clock(), self.controller.next_event_at()
            if now >= due:
                now = aligned(now, due, self._speedup)
                if refresh is not None:
                    try:
                        await refresh()
                    except Exception:
                        log.exception("autoscaler signals not refreshed (the last ones hold)")
                try:
                    self.step(now)
                except Exception:
                    log.exception("autoscaler step failed")


class ScalingCollector(Collector):
    """`burstguard_desired_replicas`, the policy's own figures (`burstguard_autoscaler_*`:
    forecast rate, burst index, lead time, metric value, panic...) and the replica counts
    the scaling model sees (`burstguard_autoscaler_replicas{state}`)."""

    def __init__(self, controller: ScalingController) -> None:
        self._ctl = controller

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            DESIRED_REPLICAS_METRIC,
            "Replicas the autoscaler policy asks for (scale a Deployment on it with KEDA)",
            value=self._ctl.desired,
        )
        for name, value in sorted(self._ctl.policy.gauges.items()):
            yield GaugeMetricFamily(
                f"burstguard_autoscaler_{name}", f"The autoscaler policy's {name}", value=value
            )
        counts = GaugeMetricFamily(
            "burstguard_autoscaler_replicas",
            "Replicas by state as the scaling model sees them",
            labels=["state"],
        )
        c = self._ctl.fleet.counts()
        for state, n in (("starting", c.starting), ("ready", c.ready), ("draining", c.draining)):
            counts.add_metric([state], n)
        yield counts
