"""ManagedProcess: `with proc.start():` and `with proc:` start one server and stop it."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

from burstguard.procs import ManagedProcess, free_port


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("started_first", [True, False])
def test_one_server_is_started_and_none_outlives_the_block(
    tmp_path: Path, started_first: bool
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = ManagedProcess(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], url,
        cwd=tmp_path,
    )  # fmt: skip
    with proc.start() if started_first else proc:
        assert answers(url)
        first = proc.proc
    assert proc.proc is first  # the block did not start a second one over the first
    assert first is not None and first.poll() is not None
    assert not answers(url)  # nothing left serving the port
