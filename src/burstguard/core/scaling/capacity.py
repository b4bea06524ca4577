"""What one replica serves, learned online from the fleet while it is busy.

A replica's capacity (tokens served per replica-second) depends on the model, the GPU,
the engine's flags and the request mix, so no constant in a policy file stays right. The
learner keeps a correction to a prior (`core.scaling.prior`: the engine profile's figure for
the current mix, or a hand-set guess): capacity = correction x prior(mix). It learns
only from intervals in which the fleet was busy (requests queued at the gateway, or
waiting in the engines, at both ends) with the same replicas ready for a while (a new
replica fills before it serves at its rate): there, tokens served per replica-second
is what a replica can serve. Observations are weighted by their replica-seconds over
a window of busy time; the estimate moves toward the window's figure at a bounded pace,
so one odd interval (a lump of long requests finishing together) cannot swing it. Learning
a correction rather than a figure keeps what was learned when the mix changes: the
prior carries the mix's effect, the correction the engine's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["CapacityLearner", "LearnerParams"]


@dataclass(frozen=True, slots=True)
class LearnerParams:
    """How much busy time the estimate averages and how fast it may move."""

    window_s: float = 300.0  # busy replica-seconds per replica kept (the newest)
    min_busy_s: float = 30.0  # busy seconds needed before the first correction
    settle_s: float = 30.0  # a replica count must have held this long to be measured
    max_change_per_min: float = 2.0  # the estimate moves by at most this factor a minute
    max_correction: float = 20.0  # prior x [1/this, this]


class CapacityLearner:
    """Correction to the prior, from busy intervals; `capacity(prior)` is the estimate."""

    def __init__(self, params: LearnerParams) -> None:
        self.params = params
        self.log_correction = 0.0
        self._obs: deque[tuple[float, float, float]] = deque()  # (busy s, tokens, prior tokens)
        self._busy_s = 0.0
        self.observations = 0

    @property
    def correction(self) -> float:
        return math.exp(self.log_correction)

    def capacity(self, prior: float) -> float:
        return prior * self.correction

    def observe(self, dt: float, served_tokens: float, replica_s: float, prior: float) -> None:
        """A busy interval of `dt` seconds: `served_tokens` over `replica_s` ready
        replica-seconds, when the prior for its mix was `prior` tokens per replica-second."""
        p = self.params
        if dt <= 0 or replica_s <= 0 or prior <= 0:
            return
        self._obs.append((dt, served_tokens, replica_s * prior))
        self._busy_s += dt
        while self._busy_s - self._obs[0][0] >= p.window_s:
            self._busy_s -= self._obs.popleft()[0]
        self.observations += 1
        if self._busy_s < p.min_busy_s:
            return
        served = sum(tokens for _, tokens, _ in self._obs)
        expected = sum(e for _, _, e in self._obs)
        if served <= 0:
            return
        target = math.log(served / expected)
        step = math.log(p.max_change_per_min) * dt / 60.0  # per minute of busy time
        moved = self.log_correction + max(-step, min(step, target - self.log_correction))
        bound = math.log(p.max_correction)
        self.log_correction = max(-bound, min(bound, moved))
