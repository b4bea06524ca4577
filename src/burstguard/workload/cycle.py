"""The seed script's burst cycle, closed loop: send a burst of 15-30 requests at once, wait
until every one of them has finished, idle 5-15 s, and start over.

`--pattern burst` is the open-loop reading of the same numbers: there each idle gap counts
from the previous burst's *start*, so a slow server gets the next burst while still busy
with the last one. Here the gap counts from the burst's *end*, as in the seed's script, so
the load waits for the server: what it measures is one burst's cost on an idle engine.
A pure state machine (times in, bursts out) shared by bench (real clock) and sim (virtual).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from burstguard.workload.seed import BURST_SIZE, IDLE_S


@dataclass(frozen=True, slots=True)
class CycleSpec:
    burst_size: tuple[int, int] = BURST_SIZE
    idle_s: tuple[float, float] = IDLE_S
    duration_s: float = 60.0
    seed: int = 0

    def __post_init__(self) -> None:
        lo, hi = self.burst_size
        if lo < 1 or hi < lo:
            raise ValueError(f"burst size {lo}-{hi}: expected 1 <= A <= B")
        if self.idle_s[0] < 0 or self.idle_s[1] < self.idle_s[0]:
            raise ValueError(f"idle {self.idle_s[0]}-{self.idle_s[1]} s: expected 0 <= A <= B")
        if self.duration_s <= 0:
            raise ValueError("duration must be > 0")


@dataclass(frozen=True, slots=True)
class Burst:
    index: int
    start_s: float
    size: int


@dataclass
class BurstCycle:
    """Bursts of the cycle, one at a time: `first()`, then `next(finished_at)` once every
    request of the current burst has finished; None once the next would start after the
    duration. `log` keeps, per burst, its start, size, end and the idle gap that followed."""

    spec: CycleSpec
    log: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.spec.seed)

    def _burst(self, start_s: float) -> Burst | None:
        if start_s >= self.spec.duration_s:
            return None
        lo, hi = self.spec.burst_size
        size = int(self._rng.integers(lo, hi + 1))
        self.log.append({"start_s": start_s, "size": size})
        return Burst(len(self.log) - 1, start_s, size)

    def first(self) -> Burst | None:
        return self._burst(0.0)

    def next(self, finished_s: float) -> Burst | None:
        """The current burst's last request finished at `finished_s`: idle, then the next."""
        idle = float(self._rng.uniform(*self.spec.idle_s))
        self.log[-1].update(finished_s=finished_s, idle_s=idle)
        return self._burst(finished_s + idle)
