"""The steady-vs-burst scenario: the two legs `bench --scenario` and `sim --scenario` run.

One rule for both (docs/bench.md, "Steady vs burst: how the rate is matched"): the steady
leg is `users` closed-loop users (the seed's 32, `workload.seed.STEADY_USERS`) or, when a
rate is given, Poisson at that rate; its measured request rate (requests sent over the
leg's duration) becomes the rate of the burst leg, the seed's burst pattern (`--burst-size`,
`--idle` scaled to that mean rate), with the same duration and request shapes. bench
measures the steady leg on a live server, sim in virtual time; both build their legs here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from burstguard.workload import seed
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, shape_pool, synthesize

SCENARIOS = ("steady-vs-burst",)


@dataclass(frozen=True)
class SteadyLeg:
    """The steady leg: `users` closed-loop users drawing from the shapes in `workload`
    for `duration_s`, or (users None) the open-loop Poisson schedule in `workload`."""

    workload: Workload
    users: int | None
    duration_s: float


def steady_leg(shape_spec: PatternSpec, rate: float | None, users: int | None) -> SteadyLeg:
    """Poisson at `rate` when one is given, else `users` (default the seed's) users."""
    if rate is None:
        return SteadyLeg(shape_pool(shape_spec), users or seed.STEADY_USERS, shape_spec.duration_s)
    poisson = synthesize(replace(shape_spec, pattern="poisson", rate=rate))
    return SteadyLeg(poisson, None, shape_spec.duration_s)


def matched_rate(steady: Mapping[str, Any]) -> float:
    """The steady leg's measured request rate, from its summary: requests sent over the
    leg's duration."""
    return float(steady["requests"]) / float(steady["duration_s"])


def burst_leg(shape_spec: PatternSpec, rate: float) -> Workload:
    """The seed's burst pattern at `rate` (the steady leg's `matched_rate`)."""
    return synthesize(replace(shape_spec, pattern="burst", rate=rate))
