"""Slicing, rate and token scaling, merging traces (library and `analyze --window/--speed`)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from tests.conftest import AZURE_CODE, BURSTGUARD, MOONCAKE_CONV

from burstguard.errors import BurstguardError
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.traces import load_workload
from burstguard.workload.transform import merge, scale_rate, scale_tokens, slice_window


def test_slice_scale_merge_on_the_azure_trace(traces_dir: object) -> None:
    w = load_workload(AZURE_CODE)
    part = slice_window(w, 600, 1200)
    assert 0 < len(part) < len(w)
    assert part.arrival_s.min() >= 0 and part.arrival_s.max() < 600
    fast = scale_rate(part, 4.0)
    assert np.allclose(fast.arrival_s * 4.0, part.arrival_s)
    both = merge([part, fast])
    assert len(both) == 2 * len(part)
    assert np.all(np.diff(both.arrival_s) >= 0)
    assert len({both.request_id(i) for i in range(len(both))}) == len(both)


def test_analyze_window_and_speed(traces_dir: object) -> None:
    base = [*BURSTGUARD, "analyze", str(AZURE_CODE), "--json"]
    full = json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)
    fast = json.loads(
        subprocess.run([*base, "--speed", "2"], capture_output=True, text=True, check=True).stdout
    )
    assert fast["mean_rate_rps"] == pytest.approx(2 * full["mean_rate_rps"], rel=1e-6)
    part = subprocess.run([*base, "--window", "0-600"], capture_output=True, text=True)
    assert part.returncode == 0 and json.loads(part.stdout)["requests"] < full["requests"]
    bad = subprocess.run([*base, "--window", "9-3"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_token_scaling_keeps_arrivals_and_the_length_shape(traces_dir: object) -> None:
    w = load_workload(AZURE_CODE)
    small = scale_tokens(w, prompt=0.05, output=0.5)
    assert np.array_equal(small.arrival_s, w.arrival_s)
    assert small.prompt_tokens.min() >= 1 and small.output_tokens.min() >= 1
    assert np.median(small.prompt_tokens) == pytest.approx(0.05 * np.median(w.prompt_tokens), abs=1)
    assert np.corrcoef(small.prompt_tokens, w.prompt_tokens)[0, 1] > 0.99
    assert small.output_tokens.sum() == pytest.approx(0.5 * w.output_tokens.sum(), rel=0.05)
    assert np.array_equal(w.prompt_tokens, load_workload(AZURE_CODE).prompt_tokens)  # a copy
    with pytest.raises(BurstguardError, match="> 0"):
        scale_tokens(w, prompt=0.0)


def test_token_scaling_scales_prefix_blocks_with_the_prompts(traces_dir: object) -> None:
    """Mooncake's 512-token blocks at 1/16 become 32-token blocks: the hashes stay, so the
    scaled requests share exactly the blocks the originals share; a scale that cuts a
    block into a fraction of a token drops them (they would no longer match)."""
    w = slice_window(load_workload(MOONCAKE_CONV), 0.0, 60.0)
    assert w.prefix_hashes is not None and w.prefix_block_tokens == 512
    small = scale_tokens(w, prompt=1 / 16, output=0.1)
    assert small.prefix_block_tokens == 32 and small.prefix_hashes == w.prefix_hashes
    assert np.all(np.abs(small.prompt_tokens - w.prompt_tokens / 16) <= 0.5)
    assert scale_tokens(w, prompt=0.3).prefix_hashes is None
    assert scale_tokens(w, output=0.5).prefix_block_tokens == 512  # prompts untouched


def test_infinite_or_nan_speed_and_scales_are_refused(traces_dir: object) -> None:
    """`--speed inf` put every arrival at 0; `--prompt-scale inf` overflowed the lengths
    to garbage (negative int64) without a word."""
    w = load_workload(AZURE_CODE)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(BurstguardError, match="finite number"):
            scale_rate(w, bad)
        with pytest.raises(BurstguardError, match="finite numbers"):
            scale_tokens(w, prompt=bad)
        with pytest.raises(BurstguardError, match="finite numbers"):
            scale_tokens(w, output=bad)


def test_rows_read_every_column_as_the_workload_does() -> None:
    """`Workload.rows()` (a simulation's reader) gives the same specs as `spec(i)`, every
    optional column set, and plain Python values."""
    specs = [
        RequestSpec("a", 0.5, 10, 3, "interactive", "t1", (1, 2), True, "s", 0, (), 0.0),
        RequestSpec("b", 1.5, 20, 4, "batch", "t2", (1,), False, "s", 1, ("a",), 2.5),
    ]
    workload = Workload.from_specs(specs)
    rows = workload.rows()
    assert [rows.spec(i) for i in range(len(rows))] == specs == list(workload.specs())
    assert type(rows.spec(1).arrival_s) is float and type(rows.spec(1).turn) is int
    bare = Workload(np.array([0.0, 1.0]), np.array([5, 6]), np.array([7, 8]))
    assert [bare.rows().spec(i) for i in range(2)] == list(bare.specs())
    assert bare.rows().request_id(1) == bare.request_id(1) == "r1"
