"""Kernel tables: measured per-layer op medians vs num_tokens (Vidur's `mlp.csv` layout).

`burstguard calibrate --kernels` fits a GPU profile to one. The packaged tables
(core/engine/kernels/, their README gives source, commit and licence) are found by file name;
a path works too. A table for a model/GPU pair nobody measured can be derived op by op:
base x num / den at the same num_tokens and tensor-parallel degree (`scale_table`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from burstguard.core.engine.specs import ModelShape
from burstguard.errors import ConfigError, FileError

KERNELS_DIR = Path(__file__).resolve().parent.parent / "core" / "engine" / "kernels"
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = (
    "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add",
)  # fmt: skip
SHAPE_COLUMNS = {"n_head": "num_heads", "n_kv_head": "num_kv_heads", "n_embd": "hidden_size",
                 "n_expanded_embd": "intermediate_size"}  # fmt: skip
"""Table columns that must match the model shape (vocab is left out: Vidur pads it)."""


@dataclass(frozen=True)
class KernelTable:
    """One tensor-parallel degree of a table: per-layer op medians in seconds."""

    source: str
    tp: int
    num_tokens: np.ndarray
    emb_s: np.ndarray
    ops_s: dict[str, np.ndarray]
    shape: dict[str, int] = field(default_factory=dict)

    def gemm_s(self, layers: int) -> np.ndarray:
        """A step's GEMM time: QKV, output projection, MLP up/gate and down, all layers."""
        return layers * sum((self.ops_s[op] for op in GEMM_OPS), np.zeros(len(self.num_tokens)))

    def elementwise_s(self, layers: int) -> np.ndarray:
        """The rest: the embedding once, norms, rope, activation and residual per layer."""
        rest = sum((self.ops_s[op] for op in ELEMENTWISE_OPS), np.zeros(len(self.num_tokens)))
        return self.emb_s + layers * rest

    def total_s(self, layers: int) -> np.ndarray:
        return self.gemm_s(layers) + self.elementwise_s(layers)

    def upto(self, max_tokens: int) -> KernelTable:
        keep = self.num_tokens <= max_tokens
        return KernelTable(
            self.source, self.tp, self.num_tokens[keep], self.emb_s[keep],
            {op: v[keep] for op, v in self.ops_s.items()}, self.shape,
        )  # fmt: skip

    def check_shape(self, shape: ModelShape) -> None:
        """Raise ConfigError when the table was measured on another model shape."""
        wrong = [f"{col} {self.shape[col]} (shape: {getattr(shape, attr)})"
                 for col, attr in SHAPE_COLUMNS.items()
                 if col in self.shape and self.shape[col] != getattr(shape, attr)]  # fmt: skip
        if wrong:
            raise ConfigError(
                f"kernel table {self.source} is for another model: {', '.join(wrong)}"
            )


def table_path(name_or_path: str) -> Path:
    """A packaged table by file name (or stem), or a path."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    packaged = KERNELS_DIR / (
        name_or_path if name_or_path.endswith(".csv") else name_or_path + ".csv"
    )
    if packaged.is_file():
        return packaged
    known = ", ".join(sorted(p.name for p in KERNELS_DIR.glob("*.csv")))
    raise FileError(f"kernel table {name_or_path!r} not found; packaged: {known}")


def read_table(name_or_path: str, tp: int) -> KernelTable:
    """The rows of one TP degree, duplicates of a num_tokens merged by their median."""
    path = table_path(name_or_path)
    rows: dict[int, list[list[float]]] = {}
    shape: dict[str, int] = {}
    cols = ("emb", *GEMM_OPS, *ELEMENTWISE_OPS)
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            try:
                if int(row["tp"]) != tp:
                    continue
                values = [float(row[f"{c}_median_ms"]) / 1e3 for c in cols]
                rows.setdefault(int(row["num_tokens"]), []).append(values)
                shape = {c: int(row[c]) for c in SHAPE_COLUMNS if row.get(c)}
            except (KeyError, ValueError) as exc:
                raise FileError(
                    f"kernel table {path}: not Vidur's mlp.csv layout ({exc})"
                ) from None
    if not rows:
        raise FileError(f"kernel table {path} has no rows for tensor-parallel degree {tp}")
    ns = np.array(sorted(rows))
    med = np.array([np.median(rows[n], axis=0) for n in ns])
    ops = {c: med[:, i] for i, c in enumerate(cols) if c != "emb"}
    return KernelTable(path.name, tp, ns, med[:, 0], ops, shape)


def scale_table(base: KernelTable, num: KernelTable, den: KernelTable) -> KernelTable:
    """base x num / den, op by op at the num_tokens all three have (e.g. H100 Llama-2-7B x
    A100 Llama-3-8B / A100 Llama-2-7B: an H100 Llama-3-8B estimate). Shape: num's."""
    common = np.intersect1d(np.intersect1d(base.num_tokens, num.num_tokens), den.num_tokens)

    def at(t: KernelTable, v: np.ndarray) -> np.ndarray:
        return v[np.searchsorted(t.num_tokens, common)]

    def scaled(b: np.ndarray, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return at(base, b) * at(num, n) / at(den, d)

    ops = {op: scaled(base.ops_s[op], num.ops_s[op], den.ops_s[op]) for op in base.ops_s}
    emb = scaled(base.emb_s, num.emb_s, den.emb_s)
    source = f"{base.source} x {num.source} / {den.source}"
    return KernelTable(source, base.tp, common, emb, ops, num.shape)
