"""A replica's capacity before any is measured: the engine profile's own answer.

The prior for the predictive policy's capacity learner (`core.scaling.capacity`): the tokens
(prompt + output) one replica serves per second when it is kept full of requests of the
current mix, found by stepping the engine core (the simulator's and the emulator's) with
`max_num_seqs` such requests in it, each replaced as it finishes. The profile is the
simulator's own, or what `burstguard calibrate` measured on a live engine; the learner
corrects it from what the fleet serves while busy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import EngineCore
from burstguard.core.engine.profile import Profile
from burstguard.core.engine.request import EngineRequest

__all__ = ["CapacityPrior", "ProfilePrior", "saturated_tokens_per_s"]

CapacityPrior = Callable[[float, float], float]
"""(mean prompt tokens, mean output tokens per request) -> tokens per replica-second."""

_BUCKETS_PER_OCTAVE = 4  # the prior is looked up on a log grid: ~19% apart, cached


def saturated_tokens_per_s(
    engine: EngineConfig, profile: Profile, prompt_tokens: int, output_tokens: int
) -> float:
    """Tokens per second one engine serves with `max_num_seqs` requests of this size in
    it (a closed loop: a finished one is replaced at once), measured over the completions
    after the first full turnover (the fill's prefills do not count)."""
    core = EngineCore(engine, profile)
    cap = core.max_model_len
    prompt = max(1, min(prompt_tokens, cap - 1))
    output = max(1, min(output_tokens, cap - prompt))
    n = core.config.max_num_seqs
    seq = 0

    def add(now: float) -> None:
        nonlocal seq
        core.add_request(EngineRequest(f"p{seq}", prompt, output, now), now)
        seq += 1

    now = 0.0
    for _ in range(n):
        add(now)
    done = 0
    start_at: float | None = None
    counted = 0
    while counted < 2 * n:
        end = core.begin_step(now)
        if end is None:  # cannot happen with requests in it; guard the loop
            break
        result = core.end_step()
        now = end
        for _ in result.finished:
            done += 1
            if start_at is None and done >= n:
                start_at = now
            elif start_at is not None:
                counted += 1
            add(now)
    if start_at is None or now <= start_at:
        return 0.0
    return counted * (prompt + output) / (now - start_at)


def _bucket(x: float) -> float:
    """`x` rounded on a log grid (a quarter octave), so a drifting mix reuses the cache."""
    return 2.0 ** (round(math.log2(max(x, 1.0)) * _BUCKETS_PER_OCTAVE) / _BUCKETS_PER_OCTAVE)


class ProfilePrior:
    """`saturated_tokens_per_s` for the mix, looked up on a log grid and cached."""

    def __init__(self, engine: EngineConfig, profile: Profile) -> None:
        self.engine = engine
        self.profile = profile
        self._cached = functools.lru_cache(maxsize=256)(self._measure)

    def _measure(self, prompt: float, output: float) -> float:
        return saturated_tokens_per_s(self.engine, self.profile, round(prompt), round(output))

    def __call__(self, prompt_tokens: float, output_tokens: float) -> float:
        return self._cached(_bucket(prompt_tokens), _bucket(output_tokens))
