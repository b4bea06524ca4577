"""What a candidate is worth: SLO-meeting requests per replica-second, on a workload.

`EngineObjective` runs one engine replica in the simulator with the candidate's flags;
`ScalingObjective` runs the gateway and an autoscaled fleet with the candidate's policy
knobs and, when it names any, engine flags too (a joint search: each replica runs them).
Picklable, so worker processes can each hold one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from burstguard.bench.records import RequestRecord
from burstguard.bench.summary import Slo
from burstguard.engine.config import EngineConfig, EngineConfigError
from burstguard.engine.profile import Profile
from burstguard.errors import BurstguardError, ConfigError
from burstguard.sim.defaults import MAX_REPLICAS
from burstguard.tune.space import ENGINE_KNOBS, SCALING_PATHS, Candidate, split
from burstguard.workload.spec import Workload
from burstguard.workload.transform import take

if TYPE_CHECKING:
    from burstguard.autoscale import ScalingPolicy


@dataclass(frozen=True, slots=True)
class ClassSlos:
    """The user's SLOs: one default and per-class overrides (`interactive: ttft=0.3`)."""

    default: Slo = field(default_factory=Slo)
    by_class: Mapping[str, Slo] = field(default_factory=dict)

    @classmethod
    def parse(cls, default: str, per_class: Sequence[str] = ()) -> ClassSlos:
        """`default` as `--slo`; each of `per_class` as `CLASS:ttft=0.3,tpot=0.05`."""
        try:
            base = Slo.parse(default)
        except ValueError as exc:
            raise ConfigError(f"--slo: {exc}") from None
        classes: dict[str, Slo] = {}
        for item in per_class:
            name, sep, text = item.partition(":")
            if not sep or not name.strip():
                raise ConfigError(f"--class-slo {item!r}: expected CLASS:ttft=S,tpot=S")
            try:
                classes[name.strip()] = replace(base, **_fields(Slo.parse(text), text))
            except ValueError as exc:
                raise ConfigError(f"--class-slo {item!r}: {exc}") from None
        return cls(base, classes)

    def met(self, record: RequestRecord) -> bool:
        slo = self.by_class.get(record.priority_class or "", self.default)
        return slo.met(record)


def _fields(slo: Slo, text: str) -> dict[str, float]:
    """Only the bounds `text` names, so a class overrides one and inherits the other."""
    return {f"{k}_s": getattr(slo, f"{k}_s") for k in ("ttft", "tpot") if f"{k}=" in text}


@dataclass(frozen=True, slots=True)
class Trial:
    """A candidate's result on the workload."""

    candidate: Candidate
    requests: int
    met: int
    replica_seconds: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else 0.0

    @property
    def goodput_per_replica_s(self) -> float:
        """The objective: requests that met their SLO per replica-second paid."""
        return self.met / self.replica_seconds if self.replica_seconds > 0 else 0.0


def jittered(workload: Workload, seed: int, jitter_s: float = 1.0) -> Workload:
    """A second sample of a trace for the robustness check: every arrival moved by up to
    `jitter_s` either way (seeded), re-sorted. Bursts longer than the jitter survive;
    which requests share a batch changes."""
    rng = np.random.default_rng(seed)
    moved = np.maximum(workload.arrival_s + rng.uniform(-jitter_s, jitter_s, len(workload)), 0.0)
    order = np.argsort(moved, kind="stable")
    out = take(workload, order)
    out.arrival_s = moved[order]
    return out


def single_replica_seconds(workload: Workload, records: Sequence[RequestRecord]) -> float:
    """One replica, kept from the first arrival's time 0 until the last request ended."""
    ends = [r.scheduled_s + (r.e2e_s or 0.0) for r in records]
    return max([float(workload.arrival_s[-1]) if len(workload) else 0.0, *ends, 1e-9])


def engine_config(base: EngineConfig, candidate: Candidate) -> EngineConfig:
    """`base` with the candidate's engine flags (its other knobs ignored)."""
    engine, _ = split(candidate)
    return replace(base, **{ENGINE_KNOBS[k].field: v for k, v in engine})


def engine_valid(base: EngineConfig, profile: Profile, candidate: Candidate) -> bool:
    """Whether vLLM would accept the candidate's engine flags on top of `base`."""
    try:
        engine_config(base, candidate).resolved(profile.max_model_len)
    except EngineConfigError:
        return False
    return True


def nearest_engine_value(base: EngineConfig, knob: str, values: Sequence[Any]) -> Any:
    """Of `values`, the one nearest to `base`'s own setting of `knob`."""
    mine = getattr(base, ENGINE_KNOBS[knob].field)
    return min(values, key=lambda v: (abs(float(v) - float(mine)), float(v)))


@dataclass(frozen=True)
class EngineObjective:
    """One engine replica with the candidate's engine flags on top of `base`."""

    workload: Workload
    base: EngineConfig
    profile: Profile
    slos: ClassSlos

    def config(self, candidate: Candidate) -> EngineConfig:
        """The engine config a candidate means (raises EngineConfigError if vLLM would)."""
        return engine_config(self.base, candidate)

    def valid(self, candidate: Candidate) -> bool:
        """Whether vLLM would accept it (e.g. not chunked prefill off with a token budget
        below the model length)."""
        return engine_valid(self.base, self.profile, candidate)

    def start(self, axes: Mapping[str, Sequence[Any]]) -> Candidate:
        """Where a local search starts: for each knob the base config's value, or the
        tried value nearest to it."""
        return tuple((k, nearest_engine_value(self.base, k, vs)) for k, vs in axes.items())

    def __call__(self, candidate: Candidate) -> Trial:
        from burstguard.sim.loop import simulate

        workload = self.workload
        result = simulate(workload, self.config(candidate), self.profile)
        met = sum(1 for r in result.records if self.slos.met(r))
        return Trial(
            candidate, len(result.records), met,
            single_replica_seconds(workload, result.records),
            {"preemptions": result.preemptions},
        )  # fmt: skip


@dataclass(frozen=True)
class ScalingObjective:
    """The gateway in front of a fleet its autoscaler sizes: the candidate sets the
    policy's knobs (`space.SCALING_PATHS`) on top of `policy`, with the common overrides
    (`max_replicas`, `cold_start_s`) kept, and any engine flags it names (`ENGINE_KNOBS`)
    on top of `engine` for every replica."""

    workload: Workload
    engine: EngineConfig
    profile: Profile
    slos: ClassSlos
    policy: str
    max_replicas: int | None = None
    cold_start_s: float | None = None
    seed: int = 0

    def scaling(self, candidate: Candidate) -> ScalingPolicy:
        """The policy a candidate means (ConfigError naming the field if it is invalid)."""
        from burstguard.autoscale import ScalingPolicy, load_policy

        values = dict(split(candidate)[1])
        name = str(values.pop("policy", self.policy))
        data = load_policy(name).model_dump(mode="json")
        for knob, value in values.items():
            *parents, leaf = SCALING_PATHS[knob][data["kind"]]
            node = data
            for key in parents:
                node = node[key]
            node[leaf] = int(value) if isinstance(node[leaf], int) else value
        return ScalingPolicy.from_dict(data, f"tune candidate {candidate}").with_overrides(
            max_replicas=self.max_replicas, cold_start_s=self.cold_start_s
        )

    def start(self, axes: Mapping[str, Sequence[Any]]) -> Candidate:
        """For each knob the base policy's value, or the tried value nearest to it."""
        base = self.scaling(())
        data = base.model_dump(mode="json")

        def nearest(knob: str, values: Sequence[Any]) -> Any:
            if knob in ENGINE_KNOBS:
                return nearest_engine_value(self.engine, knob, values)
            if knob == "policy":
                return self.policy if self.policy in values else values[0]
            node: Any = data
            for key in SCALING_PATHS[knob][base.kind]:
                node = node[key]
            return min(values, key=lambda v: (abs(float(v) - float(node)), float(v)))

        return tuple((k, nearest(k, vs)) for k, vs in axes.items())

    def valid(self, candidate: Candidate) -> bool:
        if not engine_valid(self.engine, self.profile, candidate):
            return False
        try:
            policy = self.scaling(candidate)
        except BurstguardError:
            return False
        return 1 <= policy.min_replicas <= min(policy.max_replicas, MAX_REPLICAS)

    def __call__(self, candidate: Candidate) -> Trial:
        from burstguard.sim.defaults import fleet_gateway
        from burstguard.sim.gateway_loop import simulate_gateway

        policy = self.scaling(candidate)
        res = simulate_gateway(
            self.workload, engine_config(self.engine, candidate), self.profile,
            fleet_gateway(policy.max_replicas), policy.min_replicas, scaling=policy,
            seed=self.seed,
        )  # fmt: skip
        assert res.scaling is not None
        met = sum(1 for r in res.records if self.slos.met(r))
        return Trial(
            candidate, len(res.records), met, res.scaling["replica_seconds"],
            {"scale_events": len(res.scaling["scale_events"]),
             "max_ready": max(res.scaling["replicas"]["ready"])},
        )  # fmt: skip
