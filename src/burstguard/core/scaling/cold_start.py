"""How long a new replica takes before it serves: a sum of phases, each a distribution.

A vLLM replica pays, in order: the image pull (only on a node that lacks the image), the
pod and process start (scheduling, container start, Python imports, engine init), the
weight load, and torch.compile plus CUDA-graph capture. Each phase is lognormal with a
mean and a coefficient of variation (durations are positive and right-skewed), and may
happen only with a probability (the image pull). The preset figures and their sources are
listed in docs/autoscaling.md ("Cold starts").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import ClassVar

from pydantic import ConfigDict

__all__ = ["COLD_START_PRESETS", "ColdStartModel", "Phase"]


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a cold start: lognormal(mean_s, cv), paid with `probability`."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    name: str
    mean_s: float
    cv: float = 0.0
    probability: float = 1.0

    def __post_init__(self) -> None:
        if self.mean_s < 0 or self.cv < 0 or not 0 <= self.probability <= 1:
            raise ValueError(f"cold-start phase {self.name!r}: need mean_s >= 0, cv >= 0, 0<=p<=1")

    def sample(self, rng: random.Random) -> float:
        if self.probability < 1 and rng.random() >= self.probability:
            return 0.0
        if self.cv == 0 or self.mean_s == 0:
            return self.mean_s
        sigma2 = math.log1p(self.cv * self.cv)
        return rng.lognormvariate(math.log(self.mean_s) - sigma2 / 2, math.sqrt(sigma2))


@dataclass(frozen=True, slots=True)
class ColdStartModel:
    """The time from "replica ordered" to "replica serves": the sum of its phases."""

    phases: tuple[Phase, ...]

    @classmethod
    def fixed(cls, seconds: float) -> ColdStartModel:
        """Every cold start takes exactly `seconds` (the `--cold-start-s` flag)."""
        return cls((Phase("fixed", seconds),))

    def sample(self, rng: random.Random) -> float:
        return sum(p.sample(rng) for p in self.phases)

    @property
    def mean_s(self) -> float:
        return sum(p.mean_s * p.probability for p in self.phases)

    def quantile(self, q: float, samples: int = 4000) -> float:
        """The q-quantile, by Monte Carlo with a fixed seed (deterministic, exact if fixed)."""
        if all(p.cv == 0 and p.probability in (0.0, 1.0) for p in self.phases):
            return self.mean_s
        rng = random.Random(0)
        values = sorted(self.sample(rng) for _ in range(samples))
        return values[min(int(q * samples), samples - 1)]


# Figures for an 8B model in bf16 on one datacenter GPU; sources in docs/autoscaling.md.
_START = Phase("process_start", 34.0, cv=0.2)  # vllm#20264: 59 s to first answer minus the rest
_WEIGHTS = Phase("weight_load", 10.0, cv=0.3)  # ServerlessLLM: ~1.2 s per B params (70B: 84 s)
_GRAPHS = Phase("compile_and_cuda_graphs", 24.5, cv=0.2)  # vllm#20264: 7.5 s + 17 s
_PULL = 212.0  # ~294 s uncached vs ~82 s warm (8B, L40S); vllm-openai image ~25-29 GB

COLD_START_PRESETS: dict[str, ColdStartModel] = {
    "vllm-8b-cached-image": ColdStartModel((_START, _WEIGHTS, _GRAPHS)),
    "vllm-8b-fresh-node": ColdStartModel(
        (Phase("image_pull", _PULL, cv=0.25), _START, _WEIGHTS, _GRAPHS)
    ),
    "vllm-8b-mixed": ColdStartModel(
        (Phase("image_pull", _PULL, cv=0.25, probability=0.5), _START, _WEIGHTS, _GRAPHS)
    ),
    "blis": ColdStartModel((Phase("load", 240.0, cv=30.0 / 240.0),)),  # BLIS: 240 +- 30 s
}
"""Named cold-start models; `vllm-8b-cached-image` is the default."""
