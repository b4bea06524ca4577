"""The packaged GPU profiles against the kernel data they were fitted on (shipped in
core/engine/kernels/) and against the public decode-step figures (docs/fidelity.md, GPU)."""

from __future__ import annotations

import pytest

from burstguard.calibrate.kernel_fit import DECODE, PREFILL, fit_kernels
from burstguard.calibrate.kernels import KernelTable, read_table, scale_table
from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import EngineCore
from burstguard.core.engine.kernel_model import KernelModel
from burstguard.core.engine.perf_model import BatchShape
from burstguard.core.engine.profile import Profile, list_profiles
from burstguard.core.engine.request import EngineRequest
from burstguard.core.engine.specs import load_gpu

KERNEL_FIT = [n for n in list_profiles() if Profile.load(n).kind == "kernel_fit"]
FITTED_HERE = [
    n for n in KERNEL_FIT
    if Profile.load(n).data.kernel_fit.provenance["fitted_on"]  # type: ignore[union-attr]
    == Profile.load(n).data.hardware.name  # type: ignore[union-attr]
]  # fmt: skip


def _table(profile: Profile) -> KernelTable:
    """The table the profile names in its provenance, derived as it says."""
    kf = profile.data.kernel_fit
    assert kf is not None
    files = [k["file"] for k in kf.provenance["kernels"]]
    tables = [read_table(f, kf.tensor_parallel) for f in files]
    table = scale_table(*tables) if len(tables) == 3 else tables[0]
    return table.upto(profile.max_model_len)


def _perf(name: str) -> KernelModel:
    perf = Profile.load(name).perf
    assert isinstance(perf, KernelModel)
    return perf


def test_every_gpu_profile_is_fitted_from_kernels() -> None:
    assert {"llama3-8b-a100", "llama3-8b-h100", "llama3-8b-h200", "llama2-7b-a100",
            "llama2-7b-h100", "llama3-70b-a100-tp4"} <= set(KERNEL_FIT)  # fmt: skip
    assert len(FITTED_HERE) == len(KERNEL_FIT) - 1  # llama3-8b-h200: derived from the H100 fit


@pytest.mark.parametrize("name", FITTED_HERE)
def test_linear_ops_match_the_per_op_sums_within_5_percent(name: str) -> None:
    """Prefill 128-4,096 tokens and decode batch 1-256: every measured row."""
    profile = Profile.load(name)
    table, perf = _table(profile), _perf(name)
    measured = table.total_s(profile.shape().num_layers)
    for lo, hi in (DECODE, PREFILL):
        rows = [
            (int(n), m) for n, m in zip(table.num_tokens, measured, strict=True) if lo <= n <= hi
        ]
        assert len(rows) > 30
        worst = max(abs(perf.linear.time(n) / m - 1) for n, m in rows)
        assert worst <= 0.05, f"{name}: {lo}-{hi} tokens off by {worst:.1%}"


@pytest.mark.parametrize("name", FITTED_HERE)
def test_packaged_figures_are_what_the_fit_gives_now(name: str) -> None:
    """The profile is reproducible from the shipped data (`make gpu-profiles`)."""
    profile = Profile.load(name)
    kf = profile.data.kernel_fit
    assert kf is not None and profile.data.hardware is not None
    gpu = load_gpu(
        {"NVIDIA A100 SXM 80GB": "a100-sxm-80gb", "NVIDIA H100 SXM 80GB": "h100-sxm-80gb"}[
            profile.data.hardware.name
        ]
    )
    fit = fit_kernels(_table(profile), profile.shape(), gpu)
    assert fit.mem_efficiency == pytest.approx(kf.mem_efficiency, abs=1e-3)
    assert fit.compute_efficiency == pytest.approx(kf.compute_efficiency, abs=1e-3)
    assert fit.knee == pytest.approx(kf.knee, abs=1e-2)
    assert kf.provenance["fit_error"] == fit.errors


@pytest.mark.parametrize(
    ("name", "public_s"), [("llama3-8b-h100", 7.2e-3), ("llama3-8b-a100", 11.5e-3)]
)
def test_decode_step_matches_public_vllm_figures(name: str, public_s: float) -> None:
    """A public vLLM benchmark of Llama-3-8B bf16 (issue 35): ~7.2 ms per decode step on H100,
    ~11.5 ms on A100, at batch <= 10. Contexts of 128-1,024 tokens per sequence."""
    perf = Profile.load(name)
    for batch in (1, 2, 4, 8, 10):
        for ctx in (128, 1024):
            step = perf.step_time(BatchShape(0, batch, batch * ctx, batch * (ctx + 1)))
            assert step == pytest.approx(public_s, rel=0.10), (batch, ctx, step)


def test_prefill_is_the_kernels_plus_attention_not_the_old_roofline() -> None:
    """Llama-3-8B on A100, 1,024 tokens: 75.2 ms of measured linear ops + attention + lm_head
    + overheads (the roofline profile said 98 ms)."""
    perf = Profile.load("llama3-8b-a100")
    step = perf.step_time(BatchShape(1024, 0, 0, 1024 * 1025 // 2, 1))
    assert 0.076 < step < 0.082


def test_h200_is_the_h100_fit_on_faster_memory() -> None:
    h100, h200 = _perf("llama3-8b-h100"), _perf("llama3-8b-h200")
    decode = BatchShape(0, 8, 8 * 512, 8 * 513)
    prefill = BatchShape(4096, 0, 0, 4096 * 4097 // 2, 1)
    assert h200.step_time(decode) < 0.85 * h100.step_time(decode)  # memory-bound: 3.35 -> 4.8 TB/s
    assert h200.step_time(prefill) == pytest.approx(h100.step_time(prefill), rel=0.05)


def test_tensor_parallel_profile_splits_weights_and_kv_and_pays_all_reduces() -> None:
    profile = Profile.load("llama3-70b-a100-tp4")
    perf = _perf("llama3-70b-a100-tp4")
    assert profile.tensor_parallel == 4
    assert perf.allreduce_step_s == pytest.approx(2 * 80 * 10e-6)
    # per GPU: 0.9 x 85.9 GB - 141.1 GB / 4 - 1 GB - activations ~1.6 GB = ~39.4 GB over
    # 320 KiB / 4 of KV per token (2 of the 8 KV heads): ~481,000 tokens
    tokens = profile.kv_cache_tokens(EngineConfig(gpu_memory_utilization=0.9))
    assert 470_000 < tokens < 490_000
    step = perf.step_time(BatchShape(0, 1, 512, 513))
    assert 0.025 < step < 0.035


def test_a_prefix_hit_costs_no_prefill_compute_but_its_kv_is_read() -> None:
    """1,000-token prompt, 896 of them cached: a 104-token prefill over 896 tokens of context,
    slower than a fresh 104-token prompt, far faster than the whole prompt."""
    perf = _perf("llama3-8b-h100")
    cold = perf.step_time(BatchShape(1000, 0, 0, 1000 * 1001 // 2, 1))
    hit = perf.step_time(BatchShape(104, 0, 896, 104 * 896 + 104 * 105 // 2, 1))
    fresh = perf.step_time(BatchShape(104, 0, 0, 104 * 105 // 2, 1))
    assert fresh < hit < 0.5 * cold


def test_a_prefix_hit_request_pays_its_request_cost_and_reads_its_cached_kv() -> None:
    """The step shape the engine core prices for a request whose prompt is mostly cached:
    its first step counts it as a new request (the per-request cost), the hit as context."""
    shapes: list[BatchShape] = []
    profile = Profile.load("llama3-8b-h100")
    priced = profile.perf

    class Recorder:
        def step_time(self, batch: BatchShape) -> float:
            shapes.append(batch)
            return priced.step_time(batch)

    profile.perf = Recorder()
    prefix = tuple(range(2000 // 16))
    core = EngineCore(EngineConfig(enable_prefix_caching=True), profile)
    for k in range(2):
        core.add_request(EngineRequest(f"r{k}", 2000, 1, arrival_s=0.0, prefix_hashes=prefix), 0.0)
        core.begin_step(0.0)
        core.end_step()
    cold, hit = shapes
    hits = 1999 // 16 * 16  # all full blocks but the last token's
    assert cold.prefill_seqs == 1 and cold.context_tokens == 0
    assert hit.prefill_seqs == 1  # before issue 35: 0, a hit skipped the per-request cost
    assert hit.context_tokens == hits and hit.prefill_tokens == 2000 - hits
    assert priced.step_time(hit) < 0.2 * priced.step_time(cold)
