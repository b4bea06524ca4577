"""Model shapes and GPU datasheets, as data (core/engine/models/, core/engine/gpus/).

The GPU step-time model (core/engine/kernel_model.py) and `burstguard calibrate --kernels` need
a model's shape (layers, heads, KV heads, hidden, intermediate, vocab) and a GPU's peaks;
both are figures from a config.json or a datasheet, kept in YAML files beside this module
so that a new model or GPU is a new file, not new code. A path to a YAML file works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from burstguard.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "models"
GPUS_DIR = Path(__file__).parent / "gpus"


class ModelShape(BaseModel):
    """A dense decoder-only transformer (Llama family): what its weights and KV weigh."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_model_len: int = Field(gt=1)
    dtype_bytes: float = Field(default=2, gt=0)

    @property
    def dense_params(self) -> float:
        """Weights every token multiplies: QKV, output projection, gate/up/down, all layers."""
        h, hd = self.hidden_size, self.head_dim
        qkv = h * (self.num_heads + 2 * self.num_kv_heads) * hd
        per_layer = qkv + self.num_heads * hd * h + 3 * h * self.intermediate_size
        return float(self.num_layers * per_layer)

    @property
    def head_params(self) -> float:
        """The lm_head: multiplied once per sampled sequence, not per prompt token."""
        return float(self.vocab_size * self.hidden_size)

    @property
    def params(self) -> float:
        """All weights: dense + lm_head + embedding (untied; norms left out)."""
        return self.dense_params + 2 * self.head_params

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def attention_flops_per_pair(self) -> float:
        """QK^T and PV: 2 x 2 x layers x heads x head_dim per (query, key) pair."""
        return 4.0 * self.num_layers * self.num_heads * self.head_dim


class GpuSpec(BaseModel):
    """One GPU's datasheet peaks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    memory_bytes: float = Field(gt=0)
    mem_bandwidth_bytes_s: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    interconnect_bytes_s: float = Field(gt=0)
    """GPU-to-GPU bandwidth one way (NVLink), for tensor-parallel all-reduces."""


def list_shapes() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def list_gpus() -> list[str]:
    return sorted(p.stem for p in GPUS_DIR.glob("*.yaml"))


def load_shape(name_or_path: str) -> ModelShape:
    """A packaged model shape by name (`llama3-8b`) or a YAML file. Raises ConfigError."""
    return _load(name_or_path, MODELS_DIR, "model shape", ModelShape)


def load_gpu(name_or_path: str) -> GpuSpec:
    """A packaged GPU by name (`a100-sxm-80gb`) or a YAML file. Raises ConfigError."""
    return _load(name_or_path, GPUS_DIR, "GPU", GpuSpec)


_Spec = TypeVar("_Spec", ModelShape, GpuSpec)


def _load(name_or_path: str, folder: Path, what: str, cls: type[_Spec]) -> _Spec:
    path = Path(name_or_path).expanduser()
    if not (path.suffix in (".yaml", ".yml") or "/" in name_or_path):
        path = folder / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            raise ConfigError(
                f"unknown {what} {name_or_path!r}; packaged: {known} (or a YAML path)"
            )
    if not path.is_file():
        raise ConfigError(f"{what} file {path} not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return cls.model_validate(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"{what} {path}: {where}: {first['msg']}") from None
