"""KEDA's Prometheus scaler driving an HPA: the reactive policy the seed recommends.

Three clocks run in a real cluster and all three are modelled:

- Prometheus scrapes the gateway every `scrape_interval_s`, `scrape_offset_s` after the
  HPA's first sync (two unsynchronized loops: half an interval by default), and queries
  see only samples, so the HPA reads values up to a scrape interval old (the scrape lag);
- the HPA syncs every `hpa_sync_period_s` (15 s): KEDA's metrics server runs the query
  then, and the HPA computes replicas with its tolerance, behavior and min/max
  (`burstguard.core.scaling.hpa`), with `minReplicas` = max(minReplicaCount, 1);
- the KEDA operator polls every `polling_interval_s` (30 s): the trigger is *active* when
  the query exceeds `activation_threshold`; from 0 replicas an active trigger scales to
  max(minReplicaCount, 1); with minReplicaCount 0, an inactive trigger scales to 0 once
  `cooldown_period_s` has passed since it was last active (`initial_cooldown_s` from
  creation if it never was). `cooldownPeriod` does nothing
  else: with minReplicaCount >= 1 it has no effect at all (scale-down pacing is the HPA's
  `behavior.scaleDown.stabilizationWindowSeconds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import ConfigDict

from burstguard.core.scaling.hpa import DEFAULT_BEHAVIOR, Behavior, Hpa, replicas_for_metric
from burstguard.core.scaling.policy import Decision, Signals
from burstguard.core.scaling.promql import Query, ScrapedSeries
from burstguard.core.scaling.replica_pool import FleetCounts

__all__ = ["KedaAutoscaler", "KedaParams"]


@dataclass(frozen=True, slots=True)
class KedaParams:
    """A ScaledObject with one Prometheus trigger, plus the cluster's clocks."""

    __pydantic_config__: ClassVar = ConfigDict(extra="forbid")

    query: Query
    target: float  # trigger `threshold`
    min_replicas: int = 1  # minReplicaCount
    max_replicas: int = 100  # maxReplicaCount (KEDA default)
    target_type: Literal["AverageValue", "Value"] = "AverageValue"
    activation_threshold: float = 0.0  # KEDA default
    polling_interval_s: float = 30.0  # KEDA default
    cooldown_period_s: float = 300.0  # KEDA default; to zero only
    initial_cooldown_s: float = 0.0  # KEDA initialCooldownPeriod: zero before first active
    hpa_sync_period_s: float = 15.0  # kube-controller-manager default
    scrape_interval_s: float = 15.0  # BLIS' scrape lag; Prometheus' own default is 60 s
    scrape_offset_s: float | None = None  # scrapes' phase after the HPA's; None: half
    behavior: Behavior = DEFAULT_BEHAVIOR

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise ValueError("target (the trigger threshold) must be > 0")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        for name in ("polling_interval_s", "hpa_sync_period_s", "scrape_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if (
            self.scrape_offset_s is not None
            and not 0 <= self.scrape_offset_s < self.scrape_interval_s
        ):
            raise ValueError("scrape_offset_s must be within [0, scrape_interval_s)")
        if self.cooldown_period_s < 0 or self.initial_cooldown_s < 0:
            raise ValueError("cooldown_period_s and initial_cooldown_s must be >= 0")


class KedaAutoscaler:
    """KEDA operator + metrics server + HPA controller for one ScaledObject."""

    def __init__(self, params: KedaParams, *, initial_replicas: int, start: float = 0.0) -> None:
        self.params = params
        p = params
        offset = p.scrape_interval_s / 2 if p.scrape_offset_s is None else p.scrape_offset_s
        self._series = ScrapedSeries(p.scrape_interval_s, first_at=start + offset)
        self._hpa = Hpa(max(p.min_replicas, 1), p.max_replicas, p.behavior)
        self._desired = initial_replicas
        self._next_sync = start
        self._next_poll = start
        self._created = start
        self._last_active: float | None = None  # KEDA's status.lastActiveTime
        self._value = 0.0
        self._active = False

    @property
    def desired(self) -> int:
        return self._desired

    @property
    def gauges(self) -> Mapping[str, float]:
        return {"metric_value": self._value, "active": float(self._active)}

    def next_tick_at(self) -> float:
        return min(self._series.next_scrape_at, self._next_sync, self._next_poll)

    def tick(self, now: float, signals: Signals, fleet: FleetCounts) -> Decision | None:
        p = self.params
        self._series.offer(now, signals.get(p.query.metric, 0.0))
        before = self._desired
        reason = ""
        if now >= self._next_poll:
            self._next_poll = _next_on_grid(self._next_poll, p.polling_interval_s, now)
            reason = self._poll(now) or reason
        if now >= self._next_sync:
            self._next_sync = _next_on_grid(self._next_sync, p.hpa_sync_period_s, now)
            reason = self._sync(now) or reason
        if self._desired == before:
            return None
        return Decision(now, self._desired, reason, {"metric_value": self._value})

    def _poll(self, now: float) -> str | None:
        """The KEDA operator's loop: activation, scale from and to zero."""
        p = self.params
        self._value = p.query.evaluate(self._series, now)
        self._active = self._value > p.activation_threshold
        if self._active:
            self._last_active = now
            if self._desired == 0:
                self._desired = max(p.min_replicas, 1)
                return "keda: activated from zero"
        elif p.min_replicas == 0 and self._desired > 0 and self._cooled_down(now):
            self._desired = 0
            return "keda: cooldown over, scale to zero"
        return None

    def _cooled_down(self, now: float) -> bool:
        """scale_scaledobjects.go: lastActiveTime + cooldownPeriod is before now (strictly);
        never active: creation + initialCooldownPeriod is."""
        p = self.params
        if self._last_active is None:
            return self._created + p.initial_cooldown_s < now
        return self._last_active + p.cooldown_period_s < now

    def _sync(self, now: float) -> str | None:
        """The HPA controller's loop (it leaves a target at zero alone)."""
        p = self.params
        current = self._desired
        if current == 0:
            return None
        bounded = min(max(current, self._hpa.min_replicas), p.max_replicas)
        if bounded != current:  # horizontal.go: outside [min, max] goes to the bound first
            self._desired = bounded
            return "hpa: replica count outside min/max"
        self._value = p.query.evaluate(self._series, now)
        b = p.behavior
        raw = replicas_for_metric(
            self._value,
            p.target,
            current,
            target_type=p.target_type,
            up_tolerance=b.scale_up.tolerance,
            down_tolerance=b.scale_down.tolerance,
        )
        new = self._hpa.normalize(raw, current, now)
        if new == current:
            return None
        self._hpa.record_scale(current, new, now)
        self._desired = new
        return f"hpa: metric {self._value:.3g} vs target {p.target:g} asks {raw}"


def _next_on_grid(due: float, interval: float, now: float) -> float:
    return due + interval * (math.floor((now - due) / interval) + 1)
