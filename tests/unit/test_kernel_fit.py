"""calibrate --kernels: tables, derivation, the fit and the profile it writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from burstguard.calibrate.from_kernels import calibrate_from_kernels
from burstguard.calibrate.kernel_fit import fit_kernels
from burstguard.calibrate.kernels import GEMM_OPS, KernelTable, read_table, scale_table
from burstguard.core.engine.kernel_model import LinearOps, knee, linear_ops
from burstguard.core.engine.profile import Profile
from burstguard.core.engine.specs import load_gpu, load_shape
from burstguard.errors import ConfigError

L3, A100 = load_shape("llama3-8b"), load_gpu("a100-sxm-80gb")


def test_knee_blends_max_and_sum() -> None:
    assert knee(3.0, 4.0, 1.0) == pytest.approx(7.0)
    assert knee(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert knee(3.0, 4.0, 200.0) == pytest.approx(4.0, rel=1e-3)
    assert knee(0.0, 4.0, 2.0) == 4.0


def test_correction_interpolates_between_measured_counts() -> None:
    ops = LinearOps(1.0, 0.0, 2.0, 0.0, 0.0, (8.0, 16.0), (1.0, 1.2))
    assert ops.ratio(12) == pytest.approx(1.1)
    assert ops.ratio(1) == 1.0 and ops.ratio(4096) == 1.2
    assert ops.time(12) == pytest.approx(1.1)


def _synthetic(em: float, ec: float, k: float) -> KernelTable:
    """A table made by the model itself: the GEMMs' time all in one op."""
    ns = np.array([1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096])
    model = linear_ops(L3, tp=1, bandwidth_bytes_s=A100.mem_bandwidth_bytes_s,
                       peak_flops=A100.peak_flops, mem_efficiency=em, compute_efficiency=ec,
                       knee=k, elementwise_s=0.0, activation_bytes_per_token=0.0)  # fmt: skip
    per_layer = np.array([model.smooth(float(n)) for n in ns]) / L3.num_layers
    zero = np.zeros(len(ns))
    ops = {op: zero for op in ("input_layernorm", "attn_rope", "post_attention_layernorm",
                               "mlp_act", "add", *GEMM_OPS)}  # fmt: skip
    ops["mlp_up_proj"] = per_layer
    elementwise = 0.4e-3 / L3.num_layers + ns * 2e-6 / L3.num_layers
    ops["add"] = elementwise
    return KernelTable("synthetic", 1, ns, zero, ops)


def test_fit_recovers_known_efficiencies() -> None:
    fit = fit_kernels(_synthetic(0.8, 0.65, 1.7), L3, A100)
    assert fit.mem_efficiency == pytest.approx(0.8, rel=0.01)
    assert fit.compute_efficiency == pytest.approx(0.65, rel=0.01)
    assert fit.knee == pytest.approx(1.7, rel=0.02)
    assert fit.elementwise_s == pytest.approx(0.4e-3, rel=0.01)
    bw = A100.mem_bandwidth_bytes_s * fit.mem_efficiency
    assert fit.activation_bytes_per_token / bw == pytest.approx(2e-6, rel=0.01)
    assert max(abs(r - 1) for r in fit.correction_ratio) < 0.01
    assert fit.errors["prefill"]["smooth_max_rel_error"] < 0.01


def test_derived_table_is_scaled_op_by_op() -> None:
    base = read_table("h100_meta-llama_Llama-2-7b-hf", 1)
    num = read_table("a100_meta-llama_Meta-Llama-3-8B", 1)
    den = read_table("a100_meta-llama_Llama-2-7b-hf", 1)
    derived = scale_table(base, num, den)
    i = int(np.searchsorted(derived.num_tokens, 512))
    b, n, d = (int(np.searchsorted(t.num_tokens, 512)) for t in (base, num, den))
    op = "mlp_up_proj"
    expected = base.ops_s[op][b] * num.ops_s[op][n] / den.ops_s[op][d]
    assert derived.ops_s[op][i] == pytest.approx(expected)
    assert derived.shape == num.shape  # the shape of the model it stands for


def test_table_for_another_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="another model"):
        read_table("a100_meta-llama_Llama-2-7b-hf", 1).check_shape(L3)


def test_read_table_merges_duplicate_rows_and_selects_tp() -> None:
    table = read_table("a100_meta-llama_Meta-Llama-3-8B", 4)
    assert table.tp == 4
    assert list(table.num_tokens) == sorted(set(table.num_tokens.tolist()))
    assert table.num_tokens.max() <= 8192


def test_calibrate_kernels_writes_a_profile_with_provenance(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    calibrate_from_kernels(
        kernels="a100_meta-llama_Llama-2-7b-hf", scale_by=None, shape_name="llama2-7b",
        gpu_name="a100-sxm-80gb", fitted_on=None, tp=2, out=out, name="l2-tp2",
        description="", step_overhead_s=0.8e-3, request_overhead_s=1e-3,
        allreduce_latency_s=10e-6, allreduce_efficiency=0.7,
    )  # fmt: skip
    profile = Profile.load(out)
    assert profile.kind == "kernel_fit" and profile.tensor_parallel == 2
    raw = yaml.safe_load(out.read_text())
    prov = raw["kernel_fit"]["provenance"]
    assert prov["kernels"][0]["file"] == "a100_meta-llama_Llama-2-7b-hf.csv"
    assert set(prov["fit_error"]) == {"decode", "prefill"}
    assert "allreduce" in prov["assumed"]
    assert raw["kernel_fit"]["allreduce_latency_s"] == 10e-6
