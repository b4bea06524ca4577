"""The calibrate fit recovers a known linear step model and rejects too little data."""

from __future__ import annotations

import pytest

from burstguard.calibrate.cli import kv_capacity_from_metrics
from burstguard.calibrate.fit import StepSample, fit_step_model
from burstguard.engine.perf_model import BatchShape, FittedModel

TRUTH = FittedModel(0.004, 2e-4, 1.5e-3, 4e-7)


def sample(kind: str, prefill: int, seqs: int, context: int) -> StepSample:
    return StepSample(kind, prefill, seqs, context,
                      TRUTH.step_time(BatchShape(prefill, seqs, context, 0)))  # fmt: skip


def test_fit_recovers_the_coefficients() -> None:
    samples = [sample("prefill", n, 0, 0) for n in (32, 128, 512, 1024)]
    samples += [sample("decode", 0, b, b * p) for b in (1, 4, 16) for p in (40, 540)]
    model, quality = fit_step_model(samples)
    for got, want in zip(
        (model.c0_s, model.c_prefill_token_s, model.c_decode_seq_s, model.c_context_token_s),
        (TRUTH.c0_s, TRUTH.c_prefill_token_s, TRUTH.c_decode_seq_s, TRUTH.c_context_token_s),
        strict=True,
    ):
        assert got == pytest.approx(want, rel=1e-6)
    assert quality["decode_max_rel_error"] < 1e-6


def test_fit_needs_four_steps() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        fit_step_model([sample("prefill", 32, 0, 0)])


def test_kv_capacity_from_vllm_cache_config_info() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="5824"} 1.0\n'
    )
    assert kv_capacity_from_metrics(text) == (5824, 16)
    assert kv_capacity_from_metrics("vllm:num_requests_running 0\n") is None
