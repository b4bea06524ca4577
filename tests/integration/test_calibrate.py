"""`burstguard calibrate` against an emulator with a known step model recovers that model,
and the profile it writes loads in the emulator and the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from tests.conftest import BURSTGUARD, start_emulator

from burstguard.core.engine.machine import this_cpu
from burstguard.core.engine.perf_model import BatchShape
from burstguard.core.engine.profile import Profile

TRUTH = {"c0_s": 0.004, "c_prefill_token_s": 1.0e-4, "c_decode_seq_s": 2.0e-3,
         "c_context_token_s": 2.0e-6, "kv_cache_tokens": 200_000}  # fmt: skip
SHAPES = [BatchShape(1000, 0, 0, 0), BatchShape(0, 8, 4000, 0), BatchShape(0, 16, 800, 0)]


def test_calibrate_recovers_a_known_engine(tmp_path: Path) -> None:
    truth = tmp_path / "truth.yaml"
    truth.write_text(yaml.safe_dump({
        "schema": "burstguard.profile/1", "name": "truth",
        "model": {"name": "truth-model", "max_model_len": 4096, "chat_template_tokens": 17},
        "fitted": TRUTH,
    }))  # fmt: skip
    out = tmp_path / "fitted.yaml"
    with start_emulator(tmp_path, profile=str(truth), speedup=1.0) as proc:
        res = subprocess.run(
            [*BURSTGUARD, "calibrate", "--target", proc.base_url,  # type: ignore[attr-defined]
             "--out", str(out), "--name", "fitted", "--kv-cache-tokens", "200000",
             "--batch-sizes", "1,4,8,16", "--repeats", "2"],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    print(res.stdout)
    assert res.returncode == 0, res.stderr
    want, got = Profile.load(truth), Profile.load(out)
    for shape in SHAPES:  # the fitted model predicts steps it was not shown
        assert abs(got.step_time(shape) / want.step_time(shape) - 1) < 0.25, shape
    doc = yaml.safe_load(out.read_text())
    # the emulator counts the truth's chat template into a chat prompt; calibrate reads it back
    assert doc["model"]["chat_template_tokens"] == 17
    fitted = doc["fitted"]
    # measured locally: prefill 100.8 us/token, decode 1.99 ms/seq, against the truth's
    # 100 us and 2.00 ms, and 0.94 ms per new request (the HTTP hop; the truth has none).
    # Before the burst probes separated that per-request cost, prefill read 119.7 us.
    assert abs(fitted["c_prefill_token_s"] / TRUTH["c_prefill_token_s"] - 1) < 0.3
    assert abs(fitted["c_decode_seq_s"] / TRUTH["c_decode_seq_s"] - 1) < 0.25
    # the engine ran here (loopback, no GPU device): the fit records this CPU, and using
    # the profile here draws no warning (tests/unit/test_profile_machine.py: elsewhere)
    cpu = this_cpu()
    machine = fitted["machine"]
    assert machine["device"] == "cpu" and machine["cpu_fingerprint"] == cpu.fingerprint
    assert (machine["cpu"], machine["cores"], tuple(machine["isa"])) == (
        cpu.name, cpu.cores, cpu.isa)  # fmt: skip
    assert got.cpu_warning(cpu) is None
    # its own check (calibrate/check.py): steps it was not fitted on are predicted, the
    # sentinel prefill did not drift, and the machine was measured idle before the probes
    check = fitted["fit"]["check"]
    assert check["passed"] is True and check["failures"] == []
    assert check["held_back"] >= 6 and check["held_back_max_rel_error"] < 0.2
    assert len(check["sentinel_ms"]) == 5 and check["busy_before"] is not None


def test_calibrate_refuses_a_busy_machine(tmp_path: Path) -> None:
    """Every CPU kept busy by other work: calibrate waits for quiet, then refuses to fit
    (a fit made under contention learns the contention) and writes nothing."""
    hog = "import time\nend = time.monotonic() + 90\nwhile time.monotonic() < end: pass"
    out = tmp_path / "p.yaml"
    with start_emulator(tmp_path, profile="instant", speedup=1.0) as proc:
        hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(os.cpu_count() or 2)]
        try:
            res = subprocess.run(
                [*BURSTGUARD, "calibrate", "--target", proc.base_url,  # type: ignore[attr-defined]
                 "--out", str(out), "--kv-cache-tokens", "1000", "--attempts", "2",
                 "--quiet-wait", "3"],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    assert res.returncode != 0, res.stdout
    assert "calibration not written" in res.stderr and "busy" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not out.exists()


def test_calibrate_says_what_is_missing(tmp_path: Path) -> None:
    with start_emulator(tmp_path) as proc:
        res = subprocess.run(
            [*BURSTGUARD, "calibrate", "--target", proc.base_url,  # type: ignore[attr-defined]
             "--out", str(tmp_path / "p.yaml")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert res.returncode != 0
    assert "--kv-cache-tokens" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([*BURSTGUARD, "calibrate", "--target", "http://127.0.0.1:9",
                          "--out", str(tmp_path / "p.yaml")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode != 0 and "cannot reach" in res.stderr
