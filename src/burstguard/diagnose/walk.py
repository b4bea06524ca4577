"""The walk: the five steps in the seed's order, and the first *root* cause among them.

A symptom is not a cause: a queue that grows because the KV cache is full is a KV problem,
and one that grows while slots and KV are free is a batch-building problem. A retry storm
comes first, as in the seed: it multiplies whatever else is wrong, so it is fixed first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from burstguard.diagnose.run import RunData
from burstguard.diagnose.steps import (
    Cause,
    Finding,
    Limits,
    batch_building,
    kv_memory,
    over_quota,
    queue,
    retry_storm,
    scaling_lag,
)

DIAGNOSIS_SCHEMA = "burstguard.diagnosis/1"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    run: str
    source: str
    first_cause: Cause | None
    findings: list[Finding]
    over_quota: list[dict[str, Any]] = field(default_factory=list)  # `steps.over_quota`

    def finding(self, step: Cause) -> Finding:
        return next(f for f in self.findings if f.step == step)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": DIAGNOSIS_SCHEMA,
            "run": self.run,
            "source": self.source,
            "first_cause": self.first_cause,
            "findings": [f.to_dict() for f in self.findings],
            "over_quota": self.over_quota,
        }


def _queue_cause(by: dict[Cause, Finding]) -> Cause:
    """What a found queue comes from (see the module docstring)."""
    batch, kv = by["batch_building"], by["kv_memory"]
    if batch.found and kv.found:
        share_b = batch.evidence.get("queued_below_slot_cap_with_kv_room_share") or 0.0
        share_k = kv.evidence.get("queued_with_kv_full_share") or 0.0
        return "kv_memory" if share_k >= share_b else "batch_building"
    if batch.found:
        return "batch_building"
    if kv.found:
        return "kv_memory"
    return "scaling_lag" if by["scaling_lag"].found else "queue"


def root_cause(findings: list[Finding]) -> Cause | None:
    """The first root cause in the seed's order (see the module docstring)."""
    by = {f.step: f for f in findings}
    if by["retry_storm"].found:
        return "retry_storm"
    if by["queue"].found:
        return _queue_cause(by)
    if by["kv_memory"].found:
        return "kv_memory"
    return "scaling_lag" if by["scaling_lag"].found else None


def diagnose(run: RunData, limits: Limits | None = None) -> Diagnosis:
    """Walks retry storm -> queue -> batch building -> KV memory -> scaling lag."""
    lim = limits or Limits()
    q = queue(run, lim)
    findings = [
        retry_storm(run, lim),
        q,
        batch_building(run, lim, q.found),
        kv_memory(run, lim),
        scaling_lag(run, lim, q.found),
    ]
    if q.found:
        q.evidence["caused_by"] = _queue_cause({f.step: f for f in findings})
    return Diagnosis(run.name, run.source, root_cause(findings), findings, over_quota(run))
