"""Start a server subprocess on a free local port and wait until it answers.

Used by tests, `make demo` and `burstguard engines start`: one place that knows how to
launch, wait for health and stop (SIGTERM, then SIGKILL) a child server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from burstguard.errors import TargetError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


class ManagedProcess:
    """A child server: started in its own process group, health-checked, always stopped."""

    def __init__(
        self,
        argv: Sequence[str],
        health_url: str,
        *,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 60.0,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.health_url = health_url
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ManagedProcess:
        log = self.log_path.open("wb") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TargetError(
                    f"{self.argv[0]} exited with code {self.proc.returncode} before it was "
                    f"ready{self._log_hint()}"
                )
            if http_ok(self.health_url):
                return self
            time.sleep(0.1)
        self.stop()
        raise TargetError(
            f"{self.health_url} not ready after {self.startup_timeout_s:.0f} s{self._log_hint()}"
        )

    def _log_hint(self) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-15:]
        return f" (log {self.log_path}):\n" + "\n".join(tail)

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=grace_s)
        except ProcessLookupError:
            pass

    def __enter__(self) -> ManagedProcess:
        # `with proc.start():` must not start a second process (the first would leak: the
        # second dies on the taken port after the first answered its health check)
        if self.proc is not None and self.proc.poll() is None:
            return self
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
