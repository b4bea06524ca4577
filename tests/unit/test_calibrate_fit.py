"""The calibrate fit recovers a known linear step model and rejects too little data."""

from __future__ import annotations

import pytest

from burstguard.calibrate.cli import kv_capacity_from_metrics
from burstguard.calibrate.fit import StepSample, fit_step_model
from burstguard.core.engine.perf_model import BatchShape, FittedModel

TRUTH = FittedModel(0.004, 2e-4, 1.5e-3, 4e-7, 3e-3)


def sample(kind: str, prefill: int, seqs: int, context: int, new: int = 0) -> StepSample:
    shape = BatchShape(prefill, seqs, context, 0, new)
    return StepSample(kind, prefill, seqs, context, TRUTH.step_time(shape), new)


def test_fit_recovers_the_coefficients() -> None:
    samples = [sample("prefill", n, 0, 0, 1) for n in (32, 128, 512, 1024)]
    samples += [sample("burst", b * 64, 0, 0, b) for b in (4, 12, 24)]
    samples += [sample("decode", 0, b, b * p) for b in (1, 4, 16) for p in (40, 540)]
    model, quality = fit_step_model(samples)
    fields = ("c0_s", "c_prefill_token_s", "c_decode_seq_s", "c_context_token_s",
              "c_prefill_seq_s")  # fmt: skip
    for name in fields:
        got, want = getattr(model, name), getattr(TRUTH, name)
        assert got == pytest.approx(want, rel=1e-6), name
    assert quality["decode_max_rel_error"] < 1e-6


def test_fit_needs_five_steps() -> None:
    with pytest.raises(ValueError, match="at least 5"):
        fit_step_model([sample("prefill", 32, 0, 0)])


def test_kv_capacity_from_vllm_cache_config_info() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="5824"} 1.0\n'
    )
    assert kv_capacity_from_metrics(text) == (5824, 16)
    assert kv_capacity_from_metrics("vllm:num_requests_running 0\n") is None
