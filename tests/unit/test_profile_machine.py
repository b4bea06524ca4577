"""A CPU profile belongs to the machine it was fitted on: recorded, checked, cached."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml
from tests.conftest import BURSTGUARD

from burstguard.core.engine.machine import parse_cpuinfo, this_cpu
from burstguard.core.engine.profile import PROFILES_DIR, Profile

AVX2_EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC
stepping\t: 0
flags\t\t: fpu sse2 avx fma avx2

processor\t: 1
model name\t: ignored
"""
AVX512_EPYC = AVX2_EPYC.replace("cpu family\t: 23", "cpu family\t: 25").replace(
    "avx2", "avx2 avx512f avx512_bf16")  # fmt: skip


def fitted_doc(machine: dict[str, object] | None) -> dict[str, object]:
    fitted: dict[str, object] = {"c0_s": 0.03, "c_prefill_token_s": 0.003,
                                 "c_decode_seq_s": 0.004, "c_context_token_s": 0.0,
                                 "kv_cache_tokens": 40000}  # fmt: skip
    if machine is not None:
        fitted["machine"] = machine
    return {"schema": "burstguard.profile/1", "name": "smollm2-135m-cpu",
            "model": {"name": "smollm2-135m-instruct", "max_model_len": 2048},
            "fitted": fitted}  # fmt: skip


def write(path: Path, doc: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_cpuinfo_parse_names_the_cpu_its_isa_and_a_fingerprint() -> None:
    old, new = parse_cpuinfo(AVX2_EPYC, 2), parse_cpuinfo(AVX512_EPYC, 2)
    assert (old.name, old.cores, old.isa) == ("AMD EPYC", 2, ("avx2",))
    assert new.isa == ("avx2", "avx512f", "avx512_bf16")
    assert old.name == new.name and old.fingerprint != new.fingerprint  # same name, other CPU
    assert parse_cpuinfo(AVX2_EPYC, 4).fingerprint != old.fingerprint
    assert parse_cpuinfo(AVX2_EPYC, 2) == old


def test_cpu_warning_only_for_a_cpu_fit_on_another_cpu(tmp_path: Path) -> None:
    old, new = parse_cpuinfo(AVX2_EPYC, 2), parse_cpuinfo(AVX512_EPYC, 2)
    recorded = {"device": "cpu", "cpu": old.name, "cores": 2, "isa": list(old.isa),
                "cpu_fingerprint": old.fingerprint, "engine": "vLLM 0.32.0"}  # fmt: skip
    profile = Profile.load(write(tmp_path / "p.yaml", fitted_doc(recorded)))
    assert profile.cpu_warning(old) is None
    warning = profile.cpu_warning(new)
    assert warning and "AMD EPYC, 2 cores (avx2) with vLLM 0.32.0" in warning
    assert "avx512_bf16" in warning and "burstguard calibrate" in warning
    no_print = {k: v for k, v in recorded.items() if k != "cpu_fingerprint"}
    by_name = Profile.load(write(tmp_path / "n.yaml", fitted_doc(no_print)))
    assert by_name.cpu_warning(old) is None and by_name.cpu_warning(new)  # isa differs
    gpu = Profile.load(write(tmp_path / "g.yaml", fitted_doc({**recorded, "device": "gpu"})))
    assert gpu.cpu_warning(new) is None
    assert Profile.load(write(tmp_path / "u.yaml", fitted_doc(None))).cpu_warning(new) is None
    assert Profile.load("llama3-8b-h100").cpu_warning(new) is None  # roofline: no CPU


def test_the_packaged_cpu_profile_says_where_it_was_fitted() -> None:
    # the file shipped in the package, not the name (which resolves to this machine's cached
    # calibration once the vLLM-CPU tests have made one)
    machine = Profile.load(PROFILES_DIR / "smollm2-135m-cpu.yaml").machine
    assert machine is not None and machine.device == "cpu" and machine.isa == ["avx2"]
    assert machine.engine == "vLLM 0.32.0"


def sim(profile: str, cache: Path) -> subprocess.CompletedProcess[str]:
    argv = [*BURSTGUARD, "sim", "--profile", profile, "--pattern", "constant", "--rate", "1",
            "--duration", "2"]  # fmt: skip
    env = {**os.environ, "BURSTGUARD_CACHE": str(cache)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_sim_warns_on_another_cpu_and_uses_this_machines_fit(tmp_path: Path) -> None:
    """`sim` (and `emulate`, the same options) warns on stderr for a fit from another CPU;
    a built-in name resolves to this machine's cached calibration when one exists."""
    here = this_cpu()
    other = parse_cpuinfo(AVX2_EPYC, here.cores + 1)
    elsewhere = {"device": "cpu", "cpu": other.name, "cores": other.cores,
                 "isa": list(other.isa), "cpu_fingerprint": other.fingerprint}  # fmt: skip
    foreign = write(tmp_path / "foreign.yaml", fitted_doc(elsewhere))
    res = sim(str(foreign), tmp_path / "cache")
    assert res.returncode == 0 and "warning: profile smollm2-135m-cpu was fitted on" in res.stderr

    cached = tmp_path / "cache" / "profiles" / "smollm2-135m-cpu.yaml"
    write(cached, fitted_doc({**elsewhere, "cpu_fingerprint": here.fingerprint}))
    res = sim("smollm2-135m-cpu", tmp_path / "cache")
    assert res.returncode == 0 and "this machine's calibration" in res.stderr, res.stderr
    assert "warning" not in res.stderr
    write(cached, fitted_doc(elsewhere))  # a cached fit from another CPU is not taken
    res = sim("smollm2-135m-cpu", tmp_path / "cache")
    assert "this machine's calibration" not in res.stderr


def test_calibrate_records_a_cpu_only_for_an_engine_on_this_host() -> None:
    from burstguard.calibrate.cli import engine_device, machine_section

    assert engine_device("http://10.1.2.3:8000", "auto") == "unknown"  # remote: its CPU unknown
    assert engine_device("http://10.1.2.3:8000", "cpu") == "cpu"  # as told
    remote = machine_section("http://127.0.0.1:9", "gpu")  # nothing listens: no /version
    assert remote["device"] == "gpu" and "cpu" not in remote and "engine" not in remote
