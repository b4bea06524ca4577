"""`burstguard calibrate --kernels TABLE --shape MODEL --gpu GPU --out P.yaml`: the shell.

Reads the table (and the two it is scaled by, for a derived one), fits it
(calibrate/kernel_fit.py), builds the document (calibrate/gpu_profile.py) and writes it.
"""

from __future__ import annotations

import datetime
import hashlib
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from burstguard.calibrate.gpu_profile import profile_document
from burstguard.calibrate.kernel_fit import fit_kernels
from burstguard.calibrate.kernels import read_table, scale_table, table_path
from burstguard.core.engine.specs import load_gpu, load_shape
from burstguard.errors import UserError, check_writable

SOURCE = "microsoft/vidur data/profiling/compute/<gpu>/<model>/mlp.csv at commit 7d47513 (MIT)"


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of numbers on wrapped lines (the correction's 300)."""


def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = bool(data) and all(isinstance(v, int | float) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _list)


def _file_record(name: str) -> dict[str, str]:
    path = table_path(name)
    return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16]}


def calibrate_from_kernels(
    *,
    kernels: str,
    scale_by: str | None,
    shape_name: str,
    gpu_name: str,
    fitted_on: str | None,
    tp: int,
    out: Path,
    name: str,
    description: str,
    step_overhead_s: float,
    request_overhead_s: float,
    allreduce_latency_s: float,
    allreduce_efficiency: float,
) -> None:
    check_writable(out, "--out")
    shape, gpu = load_shape(shape_name), load_gpu(gpu_name)
    table_gpu = load_gpu(fitted_on) if fitted_on else gpu
    table = read_table(kernels, tp)
    files = [_file_record(kernels)]
    derived: list[str] = []
    if scale_by:
        parts = [p.strip() for p in scale_by.split(",")]
        if len(parts) != 2:
            raise UserError(f"--scale-by: NUM,DEN (two tables), got {scale_by!r}")
        num, den = read_table(parts[0], tp), read_table(parts[1], tp)
        table = scale_table(table, num, den)
        files += [_file_record(p) for p in parts]
        derived.append(f"kernel times derived op by op: {table.source}")
    table = table.upto(shape.max_model_len)
    table.check_shape(shape)
    fit = fit_kernels(table, shape, table_gpu)
    if table_gpu != gpu:
        derived.append(
            f"efficiencies and correction fitted on {table_gpu.name} kernels, applied to "
            f"{gpu.name}'s datasheet peaks (same kernels assumed to run at the same share of "
            "peak)"
        )
    assumed = {
        "step_overhead_s": "serving overhead per step (scheduler, sampling, launches with CUDA "
        "graphs): not in the kernel table; assumed",
        "request_overhead_s": "per request whose prefill starts (API server, tokenisation): "
        "assumed; `burstguard calibrate --target` measures it",
        "attention": "roofline at the fitted efficiencies (no attention kernels measured)",
    }
    if tp > 1:
        assumed["allreduce"] = (
            "2 all-reduces per layer: latency + ring bytes over interconnect_bytes_s x "
            "allreduce_efficiency; assumed, not measured"
        )
    provenance: dict[str, Any] = {
        "source": SOURCE,
        "kernels": files,
        "tensor_parallel_rows": tp,
        "fitted_on": table_gpu.name,
        "derived": derived,
        "command": "burstguard " + shlex.join(sys.argv[1:]),
        "fitted_at": datetime.date.today().isoformat(),
        "assumed": assumed,
    }
    doc = profile_document(
        name=name, description=description or f"{shape.name} on {gpu.name}, TP {tp}",
        shape=shape, gpu=gpu, fit=fit, step_overhead_s=step_overhead_s,
        request_overhead_s=request_overhead_s, allreduce_latency_s=allreduce_latency_s,
        allreduce_efficiency=allreduce_efficiency, provenance=provenance,
        sources=[SOURCE, "model shape: core/engine/models (config.json)",
                 "GPU peaks: core/engine/gpus (NVIDIA datasheets)"],
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100))
    e = fit.errors
    print(
        f"mem_efficiency {fit.mem_efficiency:.3f}, compute_efficiency "
        f"{fit.compute_efficiency:.3f}, knee {fit.knee:.2f}, elementwise "
        f"{fit.elementwise_s * 1e3:.3f} ms + {fit.activation_bytes_per_token / 1e6:.2f} MB/token"
    )
    for regime, err in e.items():
        print(
            f"{regime} {err['num_tokens'][0]}-{err['num_tokens'][1]} tokens: smooth fit "
            f"median {err['smooth_median_rel_error']:.1%} max {err['smooth_max_rel_error']:.1%};"
            f" between measured points median {err['held_out_median_rel_error']:.1%} "
            f"max {err['held_out_max_rel_error']:.1%}"
        )
    print(f"wrote {out}")
