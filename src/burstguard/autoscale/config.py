"""A scaling policy file: which autoscaler, its parameters, and the fleet's cold start.

One YAML file (or a built-in preset name: `keda-queue`, `keda-rate`, `kpa`, `predictive`)
gives the same decisions in `burstguard sim`, in the live gateway and in the exported
Kubernetes manifest. The fields are the cores' own parameter dataclasses, validated here;
errors name the field (`keda.query: rate() is for counters only...`) as a ConfigError.
Every preset and field is documented in docs/autoscaling.md.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from burstguard.autoscale.cold_start import COLD_START_PRESETS, ColdStartModel, Phase
from burstguard.autoscale.controller import ScalingController
from burstguard.autoscale.fleet import Fleet
from burstguard.autoscale.keda import KedaAutoscaler, KedaParams
from burstguard.autoscale.kpa import KpaAutoscaler, KpaParams
from burstguard.autoscale.policy import Autoscaler
from burstguard.autoscale.predictive import PredictiveAutoscaler, PredictiveParams
from burstguard.errors import ConfigError, describe_validation_error

__all__ = ["PRESETS", "ScalingPolicy", "load_policy"]

PRESETS_DIR = Path(__file__).parent / "presets"
PRESETS = tuple(sorted(p.stem for p in PRESETS_DIR.glob("*.yaml")))

Params = KedaParams | KpaParams | PredictiveParams


class ScalingPolicy(BaseModel):
    """The whole policy file. Exactly the block named by `kind` is given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["keda", "kpa", "predictive"]
    description: str = ""
    cold_start: str | float | tuple[Phase, ...] = "vllm-8b-cached-image"
    drain_timeout_s: float = 30.0  # Kubernetes terminationGracePeriodSeconds default
    keda: KedaParams | None = None
    kpa: KpaParams | None = None
    predictive: PredictiveParams | None = None

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data: object) -> object:
        """YAML reads .inf and .nan as floats, and the cores' `x <= 0` checks let nan
        through (then a crash converting it, or a policy that never acts): none is taken,
        at any depth of the file."""

        def walk(x: object, path: str) -> None:
            if isinstance(x, float) and not math.isfinite(x):
                raise ValueError(f"{path}: must be a finite number (got {x})")
            items = (
                x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
            )
            for k, v in items:
                walk(v, f"{path}.{k}" if path else str(k))

        walk(data, "")
        return data

    @model_validator(mode="after")
    def _check(self) -> ScalingPolicy:
        given = [k for k in ("keda", "kpa", "predictive") if getattr(self, k) is not None]
        if given != [self.kind]:
            raise ValueError(
                f"kind {self.kind!r} needs exactly a `{self.kind}:` block, got {given}"
            )
        if isinstance(self.cold_start, str) and self.cold_start not in COLD_START_PRESETS:
            raise ValueError(
                f"cold_start: unknown preset {self.cold_start!r}; "
                f"one of {sorted(COLD_START_PRESETS)}, seconds, or a list of phases"
            )
        if isinstance(self.cold_start, float | int) and self.cold_start < 0:  # finite: _finite
            raise ValueError("cold_start: seconds must be >= 0")
        if self.drain_timeout_s < 0:
            raise ValueError("drain_timeout_s must be >= 0")
        return self

    # -- the parts --------------------------------------------------------------------

    @property
    def params(self) -> Params:
        p = getattr(self, self.kind)
        assert p is not None
        return p

    @property
    def min_replicas(self) -> int:
        return self.params.min_replicas

    @property
    def max_replicas(self) -> int:
        return self.params.max_replicas

    @property
    def cold_start_model(self) -> ColdStartModel:
        if isinstance(self.cold_start, str):
            return COLD_START_PRESETS[self.cold_start]
        if isinstance(self.cold_start, float | int):
            return ColdStartModel.fixed(float(self.cold_start))
        return ColdStartModel(self.cold_start)

    def with_overrides(
        self,
        *,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        cold_start_s: float | None = None,
    ) -> ScalingPolicy:
        """The common knobs (`--min-replicas`, `--max-replicas`, `--cold-start-s`)."""
        changes = {
            k: v
            for k, v in (("min_replicas", min_replicas), ("max_replicas", max_replicas))
            if v is not None
        }
        try:
            params = dataclasses.replace(self.params, **changes)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ConfigError(f"{self.kind}: {exc}") from None
        update: dict[str, object] = {self.kind: params}
        if cold_start_s is not None:
            if not 0 <= cold_start_s < math.inf:  # nan and inf too
                raise ConfigError(f"--cold-start-s must be finite and >= 0 (got {cold_start_s:g})")
            update["cold_start"] = float(cold_start_s)
        return self.model_copy(update=update)

    def build_autoscaler(self, *, initial_replicas: int, start: float = 0.0) -> Autoscaler:
        if isinstance(self.params, KedaParams):
            return KedaAutoscaler(self.params, initial_replicas=initial_replicas, start=start)
        if isinstance(self.params, KpaParams):
            return KpaAutoscaler(self.params, initial_replicas=initial_replicas, start=start)
        return PredictiveAutoscaler(
            self.params,
            initial_replicas=initial_replicas,
            lead_time_s=self.lead_time_s,
            start=start,
        )

    @property
    def lead_time_s(self) -> float:
        """Predictive only: how far ahead to provision (cold start p90 plus one bin)."""
        p = self.params
        if not isinstance(p, PredictiveParams):
            raise ValueError("lead_time_s is a predictive policy's")
        if p.lead_time_s is not None:
            return p.lead_time_s
        return self.cold_start_model.quantile(0.9) + p.bin_s

    def build_fleet(
        self, *, initial_ready: int, seed: int = 0, now: float = 0.0, auto_ready: bool = True
    ) -> Fleet:
        return Fleet(
            self.cold_start_model,
            initial_ready=initial_ready,
            drain_timeout_s=self.drain_timeout_s,
            seed=seed,
            now=now,
            auto_ready=auto_ready,
        )

    def build_controller(
        self,
        *,
        initial_replicas: int | None = None,
        seed: int = 0,
        start: float = 0.0,
        auto_ready: bool = True,
    ) -> ScalingController:
        """Policy + fleet, starting with `initial_replicas` ready (default: min_replicas)."""
        n = self.min_replicas if initial_replicas is None else initial_replicas
        return ScalingController(
            self.build_autoscaler(initial_replicas=n, start=start),
            self.build_fleet(initial_ready=n, seed=seed, now=start, auto_ready=auto_ready),
        )

    # -- files ------------------------------------------------------------------------

    def to_yaml(self) -> str:
        """The policy as a file `load_policy` reads back to an equal policy (for tune)."""
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)

    @classmethod
    def from_dict(cls, data: object, source: str) -> ScalingPolicy:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a scaling policy must be a mapping of fields")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {describe_validation_error(exc)}") from None


def load_policy(name_or_path: str | Path) -> ScalingPolicy:
    """A built-in preset by name, or a YAML file."""
    path = Path(name_or_path)
    if not path.exists():
        if str(name_or_path) not in PRESETS:
            raise ConfigError(
                f"{name_or_path}: no such file and no such preset (presets: {', '.join(PRESETS)})"
            )
        path = PRESETS_DIR / f"{name_or_path}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the scaling policy ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return ScalingPolicy.from_dict(data, str(path))
