"""Slicing, rate scaling and merging traces (library and `analyze --window/--speed`)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from tests.conftest import AZURE_CODE, BURSTGUARD

from burstguard.workload.traces import load_workload
from burstguard.workload.transform import merge, scale_rate, slice_window


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
