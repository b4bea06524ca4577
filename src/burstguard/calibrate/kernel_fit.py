"""The fit behind `burstguard calibrate --kernels`: a kernel table -> a GPU profile's figures.

The GEMMs' summed time is fitted as a roofline (memory and compute efficiency, and the
knee that blends them) by least squares on log time, each row weighted by its share of
log(num_tokens) (the table is dense at large counts; a decode step of 8 weighs as much as
a prefill of 4,096); the elementwise ops as a floor plus activation bytes per token (non-
negative least squares on relative error). What the smooth curve misses (cuBLAS tile
steps: a 160-token step slower than a 192-token one) is kept as the measured / fitted
ratio at each measured token count. Errors are reported per regime: the smooth fit's, and
the profile's between measured points (the correction taken from every other row and
checked on the rows left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

from burstguard.calibrate.kernels import KernelTable
from burstguard.core.engine.kernel_model import LinearOps, linear_ops
from burstguard.core.engine.specs import GpuSpec, ModelShape

DECODE = (1, 256)
"""Token counts of the decode regime (a step of B running requests computes B tokens)."""
PREFILL = (128, 4096)


@dataclass(frozen=True)
class KernelFit:
    """Fitted figures for one model, GPU and tensor-parallel degree."""

    tp: int
    mem_efficiency: float
    compute_efficiency: float
    knee: float
    elementwise_s: float
    activation_bytes_per_token: float
    correction_tokens: tuple[int, ...]
    correction_ratio: tuple[float, ...]
    errors: dict[str, Any]

    def linear(self, shape: ModelShape, gpu: GpuSpec, corrected: bool = True) -> LinearOps:
        corr = (tuple(map(float, self.correction_tokens)), self.correction_ratio)
        return linear_ops(
            shape, tp=self.tp, bandwidth_bytes_s=gpu.mem_bandwidth_bytes_s,
            peak_flops=gpu.peak_flops, mem_efficiency=self.mem_efficiency,
            compute_efficiency=self.compute_efficiency, knee=self.knee,
            elementwise_s=self.elementwise_s,
            activation_bytes_per_token=self.activation_bytes_per_token,
            correction=corr if corrected else ((), ()),
        )  # fmt: skip


def fit_kernels(table: KernelTable, shape: ModelShape, gpu: GpuSpec) -> KernelFit:
    """Fit `table` (already cut to the token counts that matter) for `shape` on `gpu`."""
    if len(table.num_tokens) < 8:
        raise ValueError(f"need at least 8 token counts to fit, got {len(table.num_tokens)}")
    n = table.num_tokens.astype(float)
    layers, tp = shape.num_layers, table.tp
    gemm, elem = table.gemm_s(layers), table.elementwise_s(layers)
    dense_bytes = shape.dense_params * shape.dtype_bytes / tp
    dense_flops = 2.0 * shape.dense_params / tp

    def gemm_model(p: np.ndarray) -> np.ndarray:
        em, ec, k = p
        mem = dense_bytes / (gpu.mem_bandwidth_bytes_s * em)
        comp = dense_flops * n / (gpu.peak_flops * ec)
        hi = np.maximum(mem, comp)
        return np.asarray(hi * ((mem / hi) ** k + (comp / hi) ** k) ** (1.0 / k))

    logn = np.log(n)
    weight = np.sqrt(np.gradient(logn)) if len(n) > 1 else np.ones(1)
    res = least_squares(
        lambda p: weight * np.log(gemm_model(p) / gemm), x0=[0.8, 0.6, 2.0],
        bounds=([0.05, 0.05, 1.0], [1.0, 1.0, 50.0]),
    )  # fmt: skip
    em, ec, k = (float(v) for v in res.x)
    (floor, per_token), _ = nnls(np.column_stack([1.0 / elem, n / elem]), np.ones(len(n)))
    act_bytes = float(per_token) * gpu.mem_bandwidth_bytes_s * em
    smooth = KernelFit(tp, em, ec, k, float(floor), act_bytes, (), (), {})
    measured = table.total_s(layers)
    model = smooth.linear(shape, gpu, corrected=False)
    ratio = measured / np.array([model.smooth(x) for x in n])
    tokens = tuple(int(x) for x in table.num_tokens)
    errors = _errors(table.num_tokens, measured, model, ratio)
    return KernelFit(tp, em, ec, k, float(floor), act_bytes, tokens,
                     tuple(round(float(r), 4) for r in ratio), errors)  # fmt: skip


def _errors(
    ns: np.ndarray, measured: np.ndarray, model: LinearOps, ratio: np.ndarray
) -> dict[str, Any]:
    """Relative errors per regime: the smooth fit's, and the corrected model's on rows held
    out of the correction (every other row)."""
    smooth = np.array([model.smooth(float(x)) for x in ns]) / measured - 1
    kept = np.arange(len(ns)) % 2 == 0
    between = np.interp(ns[~kept], ns[kept], ratio[kept])
    held_out = np.full(len(ns), np.nan)
    held_out[~kept] = between / ratio[~kept] - 1
    out: dict[str, Any] = {}
    for regime, (lo, hi) in (("decode", DECODE), ("prefill", PREFILL)):
        rows = (ns >= lo) & (ns <= hi)
        if not rows.any():
            continue
        held = held_out[rows & ~kept]
        out[regime] = {
            "num_tokens": [int(lo), int(min(hi, ns[rows].max()))],
            "rows": int(rows.sum()),
            "smooth_median_rel_error": round(float(np.median(np.abs(smooth[rows]))), 4),
            "smooth_max_rel_error": round(float(np.max(np.abs(smooth[rows]))), 4),
            "held_out_median_rel_error": round(float(np.median(np.abs(held))), 4),
            "held_out_max_rel_error": round(float(np.max(np.abs(held))), 4),
        }
    return out
