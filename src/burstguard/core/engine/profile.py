"""Hardware + model profiles: the data behind the step-time model and the KV pool size.

A profile is a YAML file (schema `burstguard.profile/1`, documented in docs/engine.md)
holding roofline figures (model shape, GPU peaks, efficiencies), a GPU fit to measured
kernel times (`kernel_fit`, core/engine/kernel_model.py) or a linear fit of measured step
times. Built-in profiles live in `core/engine/profiles/`; a path works too.
A fitted profile records the machine it was fitted on (`fitted.machine`): a CPU engine's
speed is its machine's, so a built-in name resolves to this machine's own calibration
when one is cached (`machine_profile_path`, written by `engines.vllm_cpu.machine_profile`
for the reference engine), and `cpu_warning` says when a CPU fit is used on another CPU.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from burstguard.core.engine.config import EngineConfig, EngineConfigError
from burstguard.core.engine.kernel_model import KernelModel, kernel_model, linear_ops
from burstguard.core.engine.machine import CpuInfo, this_cpu
from burstguard.core.engine.perf_model import BatchShape, FittedModel, PerfModel, RooflineModel
from burstguard.core.engine.specs import ModelShape
from burstguard.errors import BurstguardError, ConfigError

PROFILE_SCHEMA = "burstguard.profile/1"
PROFILES_DIR = Path(__file__).parent / "profiles"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    name: str
    max_model_len: int = Field(gt=1)
    params: float | None = Field(default=None, gt=0)
    num_layers: int | None = Field(default=None, gt=0)
    num_heads: int | None = Field(default=None, gt=0)
    num_kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    dtype_bytes: float | None = Field(default=None, gt=0)
    weight_bytes: float | None = Field(default=None, gt=0)
    hidden_size: int | None = Field(default=None, gt=0)
    intermediate_size: int | None = Field(default=None, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    chat_template_tokens: int = Field(default=0, ge=0)
    """Tokens the served model's chat template adds to a chat request beyond burstguard's
    counting rule (`wire.tokens`: 4 per message + 3): e.g. a default system prompt that
    the template inserts. Measured by `burstguard calibrate` from the engine's usage."""


class HardwareSection(_Strict):
    name: str
    gpu_memory_bytes: float = Field(gt=0)
    mem_bandwidth_bytes_s: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    interconnect_bytes_s: float | None = Field(default=None, gt=0)


class RooflineSection(_Strict):
    mem_efficiency: float = Field(gt=0, le=1)
    compute_efficiency: float = Field(gt=0, le=1)
    step_overhead_s: float = Field(ge=0)


class CorrectionSection(_Strict):
    """Measured / fitted linear-op time at the kernel table's token counts."""

    num_tokens: list[int]
    ratio: list[float]

    @model_validator(mode="after")
    def _same_length(self) -> CorrectionSection:
        if len(self.num_tokens) != len(self.ratio) or self.num_tokens != sorted(self.num_tokens):
            raise ValueError("num_tokens (ascending) and ratio need the same length")
        return self


class KernelFitSection(_Strict):
    """A GPU profile fitted to measured kernel times (`burstguard calibrate --kernels`;
    core/engine/kernel_model.py says what each figure multiplies)."""

    tensor_parallel: int = Field(default=1, gt=0)
    mem_efficiency: float = Field(gt=0, le=1)
    compute_efficiency: float = Field(gt=0, le=1)
    knee: float = Field(ge=1)
    elementwise_s: float = Field(ge=0)
    activation_bytes_per_token: float = Field(ge=0)
    correction: CorrectionSection | None = None
    step_overhead_s: float = Field(ge=0)
    request_overhead_s: float = Field(default=0.0, ge=0)
    allreduce_latency_s: float = Field(default=0.0, ge=0)
    allreduce_efficiency: float = Field(default=1.0, gt=0, le=1)
    provenance: dict[str, Any] = Field(default_factory=dict)


class MemorySection(_Strict):
    fixed_reserve_bytes: float = Field(ge=0)
    activation_bytes_per_batched_token: float = Field(ge=0)


class MachineSection(_Strict):
    """Where a fit was made: `device` cpu when the engine ran on this CPU (then `cpu`,
    `cores`, `isa` and `cpu_fingerprint` describe it), gpu or unknown (a remote engine)."""

    device: Literal["cpu", "gpu", "unknown"] = "unknown"
    cpu: str | None = None
    cores: int | None = Field(default=None, gt=0)
    isa: list[str] | None = None
    cpu_fingerprint: str | None = None
    engine: str | None = None
    """The engine and its version, e.g. `vLLM 0.32.0` (from its /version)."""
    fitted_at: str | None = None


class FittedSection(_Strict):
    c0_s: float = Field(ge=0)
    c_prefill_token_s: float = Field(ge=0)
    c_decode_seq_s: float = Field(ge=0)
    c_context_token_s: float = Field(ge=0)
    c_prefill_seq_s: float = Field(default=0.0, ge=0)
    kv_cache_tokens: int | None = Field(default=None, gt=0)
    kv_cache_blocks: int | None = Field(default=None, gt=0)
    kv_block_size: int = Field(default=16, gt=0)
    machine: MachineSection | None = None
    fit: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_capacity(self) -> FittedSection:
        if (self.kv_cache_tokens is None) == (self.kv_cache_blocks is None):
            raise ValueError("give exactly one of kv_cache_tokens or kv_cache_blocks")
        return self

    @property
    def capacity_tokens(self) -> int:
        if self.kv_cache_tokens is not None:
            return self.kv_cache_tokens
        assert self.kv_cache_blocks is not None
        return self.kv_cache_blocks * self.kv_block_size


class ProfileFile(_Strict):
    """The YAML document: one of `roofline` or `kernel_fit` (each with `hardware`,
    `memory` and a full `model`) or `fitted`."""

    schema_: Literal["burstguard.profile/1"] = Field(alias="schema")
    name: str
    description: str = ""
    model: ModelSection
    hardware: HardwareSection | None = None
    roofline: RooflineSection | None = None
    kernel_fit: KernelFitSection | None = None
    memory: MemorySection | None = None
    fitted: FittedSection | None = None
    sources: list[str] = Field(default_factory=list)
    notes: str = ""

    @model_validator(mode="after")
    def _one_kind(self) -> ProfileFile:
        kinds = [k for k in ("roofline", "kernel_fit", "fitted") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of the sections `roofline`, `kernel_fit`, `fitted`")
        if kinds[0] != "fitted":
            missing = [s for s in ("hardware", "memory") if getattr(self, s) is None]
            shape = [
                "params",
                "num_layers",
                "num_heads",
                "num_kv_heads",
                "head_dim",
                "dtype_bytes",
                "weight_bytes",
            ]
            if kinds[0] == "kernel_fit":
                shape += ["hidden_size", "intermediate_size", "vocab_size"]
            missing += [f"model.{f}" for f in shape if getattr(self.model, f) is None]
            tp = self.kernel_fit.tensor_parallel if self.kernel_fit is not None else 1
            if tp > 1 and self.hardware is not None and self.hardware.interconnect_bytes_s is None:
                missing.append("hardware.interconnect_bytes_s")
            if missing:
                raise ValueError(f"a {kinds[0]} profile needs {', '.join(missing)}")
        return self


class Profile:
    """A loaded profile: step times for batches and the KV block count for a config."""

    def __init__(self, data: ProfileFile, path: Path) -> None:
        self.data = data
        self.path = path
        self.name = data.name
        self.model_name = data.model.name
        self.max_model_len = data.model.max_model_len
        self.chat_template_tokens = data.model.chat_template_tokens
        self.perf: PerfModel = self._perf_model()

    def __reduce__(self) -> tuple[type[Profile], tuple[ProfileFile, Path]]:
        """Pickled as its document: the step-time model is rebuilt on the other side (the
        compiled build's frozen models cannot be unpickled field by field; `tune --ray`
        ships profiles to its workers)."""
        return (Profile, (self.data, self.path))

    @classmethod
    def load(cls, name_or_path: str | Path) -> Profile:
        """A built-in profile by name, or a YAML file by path. Raises ConfigError."""
        path = _resolve(str(name_or_path))
        return cls(_parse(path), path)

    @property
    def kind(self) -> str:
        """`roofline`, `kernel_fit` or `fitted`: the section the profile gives."""
        d = self.data
        return "roofline" if d.roofline else "kernel_fit" if d.kernel_fit else "fitted"

    @property
    def tensor_parallel(self) -> int:
        return self.data.kernel_fit.tensor_parallel if self.data.kernel_fit else 1

    def shape(self) -> ModelShape:
        """The model's shape (a `kernel_fit` profile's `model` section)."""
        m = self.data.model
        return ModelShape.model_validate(
            {f: getattr(m, f) for f in ModelShape.model_fields if f != "name"} | {"name": m.name}
        )

    @property
    def kv_bytes_per_token(self) -> float | None:
        m = self.data.model
        if self.kind == "fitted":
            return None
        assert m.num_layers and m.num_kv_heads and m.head_dim and m.dtype_bytes
        return 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * m.dtype_bytes

    def _perf_model(self) -> PerfModel:
        d = self.data
        if d.fitted is not None:
            f = d.fitted
            return FittedModel(
                f.c0_s, f.c_prefill_token_s, f.c_decode_seq_s, f.c_context_token_s,
                f.c_prefill_seq_s,
            )  # fmt: skip
        if d.kernel_fit is not None:
            return self._kernel_model(d.kernel_fit)
        m, hw, rl = d.model, d.hardware, d.roofline
        assert hw is not None and rl is not None
        assert m.params and m.weight_bytes and m.num_layers and m.num_heads and m.head_dim
        kv = self.kv_bytes_per_token
        assert kv is not None
        return RooflineModel(
            params=m.params,
            weight_bytes=m.weight_bytes,
            kv_bytes_per_token=kv,
            attention_flops_per_pair=4.0 * m.num_layers * m.num_heads * m.head_dim,
            mem_bandwidth_bytes_s=hw.mem_bandwidth_bytes_s,
            peak_flops=hw.peak_flops,
            mem_efficiency=rl.mem_efficiency,
            compute_efficiency=rl.compute_efficiency,
            step_overhead_s=rl.step_overhead_s,
        )

    def _kernel_model(self, kf: KernelFitSection) -> KernelModel:
        hw, shape = self.data.hardware, self.shape()
        assert hw is not None
        gpu = {"bandwidth_bytes_s": hw.mem_bandwidth_bytes_s, "peak_flops": hw.peak_flops,
               "mem_efficiency": kf.mem_efficiency,
               "compute_efficiency": kf.compute_efficiency}  # fmt: skip
        corr = kf.correction
        points = (tuple(map(float, corr.num_tokens)), tuple(corr.ratio)) if corr else ((), ())
        linear = linear_ops(
            shape, tp=kf.tensor_parallel, knee=kf.knee, elementwise_s=kf.elementwise_s,
            activation_bytes_per_token=kf.activation_bytes_per_token, correction=points, **gpu,
        )  # fmt: skip
        return kernel_model(
            shape, linear, tp=kf.tensor_parallel, interconnect_bytes_s=hw.interconnect_bytes_s,
            allreduce_latency_s=kf.allreduce_latency_s,
            allreduce_efficiency=kf.allreduce_efficiency, step_overhead_s=kf.step_overhead_s,
            request_overhead_s=kf.request_overhead_s, **gpu,
        )  # fmt: skip

    @property
    def machine(self) -> MachineSection | None:
        return self.data.fitted.machine if self.data.fitted is not None else None

    def cpu_warning(self, cpu: CpuInfo) -> str | None:
        """Why this profile's step times may not hold on `cpu`, or None: a CPU fit (made
        with the engine on the CPU) used on a CPU with another name, core count, vector
        extensions or fingerprint."""
        fit = self.machine
        if fit is None or fit.device != "cpu" or fit.cpu is None:
            return None
        if fit.cpu_fingerprint is not None:
            same = fit.cpu_fingerprint == cpu.fingerprint
        else:
            same = (fit.cpu, fit.cores, tuple(fit.isa or ())) == (cpu.name, cpu.cores, cpu.isa)
        if same:
            return None
        isa = ", ".join(fit.isa or ()) or "no AVX2/AVX-512/AMX"
        where = f"{fit.cpu}, {fit.cores or '?'} cores ({isa})"
        engine = f" with {fit.engine}" if fit.engine else ""
        return (
            f"profile {self.name} was fitted on {where}{engine}; this machine has "
            f"{cpu.describe()}. A CPU engine's step times belong to its machine: fit "
            "this one with `burstguard calibrate --target URL --out P.yaml` (docs/fidelity.md)"
        )

    def step_time(self, batch: BatchShape) -> float:
        return self.perf.step_time(batch)

    def kv_cache_tokens(self, config: EngineConfig) -> int:
        """KV capacity in tokens. Roofline: (GPU memory * utilization - weights - fixed
        reserve - activations of one max_num_batched_tokens step) / KV bytes per token.
        Fitted: the measured capacity (gpu_memory_utilization does not apply). With tensor
        parallelism each GPU holds 1/tp of the weights and of every token's KV."""
        d = self.data
        if d.fitted is not None:
            return d.fitted.capacity_tokens
        hw, mem, m = d.hardware, d.memory, d.model
        assert hw is not None and mem is not None and m.weight_bytes is not None
        kv = self.kv_bytes_per_token
        assert kv is not None
        tp = self.tensor_parallel
        free = (
            hw.gpu_memory_bytes * config.gpu_memory_utilization
            - m.weight_bytes / tp
            - mem.fixed_reserve_bytes
            - mem.activation_bytes_per_batched_token * config.max_num_batched_tokens
        )
        if free <= 0:
            raise EngineConfigError(
                f"profile {self.name}: no GPU memory left for the KV cache at "
                f"--gpu-memory-utilization {config.gpu_memory_utilization} "
                f"({hw.gpu_memory_bytes * config.gpu_memory_utilization / 1e9:.1f} GB usable, "
                f"weights {m.weight_bytes / tp / 1e9:.1f} GB per GPU); "
                "raise --gpu-memory-utilization"
            )
        return int(free // (kv / tp))

    def num_kv_blocks(self, config: EngineConfig) -> int:
        return math.floor(self.kv_cache_tokens(config) / config.block_size)

    def __repr__(self) -> str:
        return f"Profile({self.name!r}, kind={self.kind}, path={str(self.path)!r})"


def list_profiles() -> list[str]:
    """Names of the built-in profiles."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def machine_profile_path(name: str) -> Path:
    """Where this machine's own calibration of built-in profile `name` is cached."""
    from burstguard.paths import CACHE_ROOT

    return CACHE_ROOT / "profiles" / f"{name}.yaml"


def _calibrated_here(name: str) -> Path | None:
    """This machine's calibration of `name`, if cached and fitted on this very CPU."""
    path = machine_profile_path(name)
    if not path.is_file():
        return None
    try:
        fitted = _parse(path.resolve()).fitted
    except BurstguardError:
        return None
    machine = fitted.machine if fitted is not None else None
    here = machine is not None and machine.cpu_fingerprint == this_cpu().fingerprint
    return path.resolve() if here else None


def _resolve(name_or_path: str) -> Path:
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            raise ConfigError(f"profile file {candidate} not found")
        return candidate.resolve()
    builtin = PROFILES_DIR / f"{name_or_path}.yaml"
    if not builtin.is_file():
        raise ConfigError(
            f"unknown profile {name_or_path!r}; built-in profiles: "
            f"{', '.join(list_profiles())} (or pass a path to a profile YAML file)"
        )
    return _calibrated_here(name_or_path) or builtin


@functools.lru_cache(maxsize=64)
def _parse(path: Path) -> ProfileFile:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"profile {path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"profile {path}: expected a mapping at the top level")
    try:
        return ProfileFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"profile {path}: {where}: {first['msg']}") from None
