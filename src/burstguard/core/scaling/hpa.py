"""Kubernetes' HorizontalPodAutoscaler, as the controller computes it (autoscaling/v2).

Ported from kubernetes pkg/controller/podautoscaler (horizontal.go, replica_calculator.go):

- metric -> replicas: an External metric with an `AverageValue` target asks for
  ceil(total / target) replicas, unless total / (target x current) is within the
  tolerance of 1 (10% by default; per direction with `behavior.*.tolerance`);
  a `Value` target asks for ceil(current x value / target), same tolerance;
- stabilization: the recommendation is clamped between the *minimum* of the raw
  recommendations within the scale-up window and the *maximum* of those within the
  scale-down window (so a scale-down takes the highest recommendation of the last 300 s);
- rate limits: each policy allows, per `periodSeconds`, +`value` pods or +`value`% of the
  count at the period's start; `selectPolicy` Max takes the most permissive, Min the
  least, Disabled none; a scale-up rounds the percent up, a scale-down rounds down;
- min/max replicas bound the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import ConfigDict

__all__ = [
    "DEFAULT_BEHAVIOR",
    "Behavior",
    "Hpa",
    "HpaScalingPolicy",
    "ScalingRules",
    "replicas_for_metric",
]

SelectPolicy = Literal["Max", "Min", "Disabled"]
DEFAULT_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance


@dataclass(frozen=True, slots=True)
class HpaScalingPolicy:
    """Allow a change of `value` pods (type Pods) or percent (Percent) per `period_s`."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    type: Literal["Pods", "Percent"]
    value: int
    period_s: int

    def __post_init__(self) -> None:
        if self.value <= 0 or not 0 < self.period_s <= 1800:
            raise ValueError("a scaling policy needs value > 0 and 0 < period_s <= 1800")


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction's behavior: stabilization window, policies, how to pick, tolerance."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    stabilization_window_s: int
    policies: tuple[HpaScalingPolicy, ...]
    select_policy: SelectPolicy = "Max"
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if not 0 <= self.stabilization_window_s <= 3600:
            raise ValueError("stabilization_window_s must be within 0..3600")
        if not self.policies and self.select_policy != "Disabled":
            raise ValueError("give at least one policy (or select_policy: Disabled)")
        if self.tolerance < 0:
            raise ValueError("tolerance must be >= 0")


@dataclass(frozen=True, slots=True)
class Behavior:
    """HPA `behavior`; the defaults are Kubernetes' own (HPA API reference)."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    scale_up: ScalingRules = ScalingRules(
        0, (HpaScalingPolicy("Percent", 100, 15), HpaScalingPolicy("Pods", 4, 15))
    )
    scale_down: ScalingRules = ScalingRules(300, (HpaScalingPolicy("Percent", 100, 15),))


DEFAULT_BEHAVIOR = Behavior()


def replicas_for_metric(
    value: float,
    target: float,
    current: int,
    *,
    target_type: Literal["AverageValue", "Value"] = "AverageValue",
    up_tolerance: float = DEFAULT_TOLERANCE,
    down_tolerance: float = DEFAULT_TOLERANCE,
) -> int:
    """What the HPA's replica calculator asks for, before behavior and bounds."""
    if current <= 0:
        raise ValueError("the HPA does not act on a target scaled to zero (KEDA does)")
    ratio = value / (target * current) if target_type == "AverageValue" else value / target
    if 1 - down_tolerance <= ratio <= 1 + up_tolerance:
        return current
    if target_type == "AverageValue":
        return math.ceil(value / target)
    return math.ceil(ratio * current)


@dataclass(slots=True)
class _Event:
    time: float
    change: int


@dataclass(slots=True)
class Hpa:
    """The HPA controller's memory for one target: recommendations and scale events."""

    min_replicas: int
    max_replicas: int
    behavior: Behavior = DEFAULT_BEHAVIOR
    _recommendations: list[tuple[float, int]] = field(default_factory=list, init=False)
    _ups: list[_Event] = field(default_factory=list, init=False)
    _downs: list[_Event] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 1 <= min_replicas <= max_replicas for the HPA")

    def normalize(self, recommended: int, current: int, now: float) -> int:
        """Stabilize `recommended`, then apply the rate policies and min/max."""
        if not self._recommendations:  # horizontal.go recordInitialRecommendation
            self._recommendations.append((now, current))
        stabilized = self._stabilize(recommended, current, now)
        return self._limit(stabilized, current, now)

    def record_scale(self, before: int, after: int, now: float) -> None:
        """The HPA changed the target from `before` to `after` (storeScaleEvent)."""
        if after > before:
            self._ups.append(_Event(now, after - before))
        elif after < before:
            self._downs.append(_Event(now, before - after))
        longest = max(
            (
                p.period_s
                for r in (self.behavior.scale_up, self.behavior.scale_down)
                for p in r.policies
            ),
            default=0,
        )
        self._ups = [e for e in self._ups if e.time > now - longest]
        self._downs = [e for e in self._downs if e.time > now - longest]

    def _stabilize(self, recommended: int, current: int, now: float) -> int:
        up_cut = now - self.behavior.scale_up.stabilization_window_s
        down_cut = now - self.behavior.scale_down.stabilization_window_s
        up_rec = down_rec = recommended
        old = None
        for i, (t, rec) in enumerate(self._recommendations):
            if t > up_cut:
                up_rec = min(up_rec, rec)
            if t > down_cut:
                down_rec = max(down_rec, rec)
            if t < up_cut and t < down_cut:
                old = i
        result = max(current, up_rec)
        result = min(result, down_rec)
        if old is not None:  # reuse one expired slot, as the controller does
            self._recommendations[old] = (now, recommended)
        else:
            self._recommendations.append((now, recommended))
        return result

    def _limit(self, desired: int, current: int, now: float) -> int:
        if desired > current:
            limit = max(self._rate_limit(current, now, up=True), current)
            return min(desired, limit, self.max_replicas)
        if desired < current:
            limit = min(self._rate_limit(current, now, up=False), current)
            return max(desired, limit, self.min_replicas)
        return desired

    def _period_start(self, current: int, period_s: int, now: float) -> int:
        added = sum(e.change for e in self._ups if e.time > now - period_s)
        removed = sum(e.change for e in self._downs if e.time > now - period_s)
        return current - added + removed

    def _rate_limit(self, current: int, now: float, *, up: bool) -> int:
        """The furthest count the policies allow from `current` in one direction."""
        rules = self.behavior.scale_up if up else self.behavior.scale_down
        if rules.select_policy == "Disabled":
            return current
        proposals = []
        for p in rules.policies:
            start = self._period_start(current, p.period_s, now)
            if p.type == "Pods":
                proposals.append(start + p.value if up else start - p.value)
            elif up:  # rounded up, or a small count could never grow
                proposals.append(math.ceil(start * (1 + p.value / 100)))
            else:
                proposals.append(int(start * (1 - p.value / 100)))
        # Max: the most permissive policy (the highest count up, the lowest down); Min: least
        permissive, strict = (max, min) if up else (min, max)
        return (permissive if rules.select_policy == "Max" else strict)(proposals)
