"""Shared test fixtures: repo paths and real servers on free local ports."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstguard.procs import ManagedProcess, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = REPO_ROOT.parent / "shared" / "traces"
AZURE_CODE = TRACES_DIR / "azure2023_code.csv"
MOONCAKE_CONV = TRACES_DIR / "mooncake_conversation.jsonl"
BURSTGUARD = [sys.executable, "-m", "burstguard.cli"]


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES_DIR.is_dir():
        pytest.fail(f"real traces not found at {TRACES_DIR} (expected ../shared/traces)")
    return TRACES_DIR


def start_emulator(
    tmp_path: Path, *args: str, profile: str = "llama3-8b-h100", speedup: float = 20.0
) -> ManagedProcess:
    """Starts `burstguard emulate` on a free port; the caller stops it (or uses `with`)."""
    port = free_port()
    argv = [
        *BURSTGUARD, "emulate", "--profile", profile, "--host", "127.0.0.1",
        "--port", str(port), "--speedup", str(speedup), *args,
    ]
    proc = ManagedProcess(
        argv, f"http://127.0.0.1:{port}/health", log_path=tmp_path / f"emulator-{port}.log"
    )
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[str]:
    """A running emulator (llama3-8b-h100, 20x speed-up); yields its base URL."""
    proc = start_emulator(tmp_path)
    with proc:
        yield proc.base_url  # type: ignore[attr-defined]
