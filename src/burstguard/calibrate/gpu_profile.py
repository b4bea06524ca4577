"""A `kernel_fit` profile document from a kernel fit: figures plus their provenance.

Pure: the caller reads tables and writes the file. What the kernel table does not hold
(serving overhead per step, cost per request, tensor-parallel all-reduces, KV pool
reserve) comes in as arguments, each recorded in the profile as an assumption.
"""

from __future__ import annotations

from typing import Any

from burstguard.calibrate.kernel_fit import KernelFit
from burstguard.core.engine.specs import GpuSpec, ModelShape

FIXED_RESERVE_BYTES = 1.0e9
"""CUDA graphs, NCCL/cuBLAS workspaces, non-torch allocations (estimate, as before)."""


def activation_bytes_per_batched_token(shape: ModelShape) -> float:
    """vLLM's profiling-run peak per batched token (estimate): (hidden + 2 x intermediate)
    x dtype x 1.5."""
    return (shape.hidden_size + 2 * shape.intermediate_size) * shape.dtype_bytes * 1.5


def profile_document(
    *,
    name: str,
    description: str,
    shape: ModelShape,
    gpu: GpuSpec,
    fit: KernelFit,
    step_overhead_s: float,
    request_overhead_s: float,
    allreduce_latency_s: float,
    allreduce_efficiency: float,
    provenance: dict[str, Any],
    sources: list[str],
    notes: str = "",
) -> dict[str, Any]:
    """The profile as a mapping (schema burstguard.profile/1, section `kernel_fit`)."""
    kernel_fit: dict[str, Any] = {
        "tensor_parallel": fit.tp,
        "mem_efficiency": round(fit.mem_efficiency, 4),
        "compute_efficiency": round(fit.compute_efficiency, 4),
        "knee": round(fit.knee, 4),
        "elementwise_s": round(fit.elementwise_s, 7),
        "activation_bytes_per_token": round(fit.activation_bytes_per_token),
        "step_overhead_s": step_overhead_s,
        "request_overhead_s": request_overhead_s,
    }
    if fit.tp > 1:
        kernel_fit |= {"allreduce_latency_s": allreduce_latency_s,
                       "allreduce_efficiency": allreduce_efficiency}  # fmt: skip
    kernel_fit["correction"] = {"num_tokens": list(fit.correction_tokens),
                                "ratio": list(fit.correction_ratio)}  # fmt: skip
    kernel_fit["provenance"] = provenance | {"fit_error": fit.errors}
    return {
        "schema": "burstguard.profile/1",
        "name": name,
        "description": description,
        "model": {
            "name": shape.name,
            "max_model_len": shape.max_model_len,
            "params": round(shape.params, -6),
            "num_layers": shape.num_layers,
            "num_heads": shape.num_heads,
            "num_kv_heads": shape.num_kv_heads,
            "head_dim": shape.head_dim,
            "hidden_size": shape.hidden_size,
            "intermediate_size": shape.intermediate_size,
            "vocab_size": shape.vocab_size,
            "dtype_bytes": shape.dtype_bytes,
            "weight_bytes": round(shape.weight_bytes, -6),
        },
        "hardware": {
            "name": gpu.name,
            "gpu_memory_bytes": gpu.memory_bytes,
            "mem_bandwidth_bytes_s": gpu.mem_bandwidth_bytes_s,
            "peak_flops": gpu.peak_flops,
            "interconnect_bytes_s": gpu.interconnect_bytes_s,
        },
        "kernel_fit": kernel_fit,
        "memory": {
            "fixed_reserve_bytes": FIXED_RESERVE_BYTES,
            "activation_bytes_per_batched_token": activation_bytes_per_batched_token(shape),
        },
        "sources": sources,
        "notes": notes,
    }
