"""A throwaway `redis-server` on a free 127.0.0.1 port, for tests and benchmarks of the
gateways' shared state: no persistence, so a restart comes back empty (as a Redis pod
without a volume does); `kill` is SIGKILL, as a crash is."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

from burstguard.errors import TargetError
from burstguard.procs import free_port


class RedisServer:
    def __init__(self, workdir: Path, startup_timeout_s: float = 10.0) -> None:
        if shutil.which("redis-server") is None:
            raise TargetError(
                "redis-server is not installed (Debian: apt-get install redis-server)"
            )
        self.port = free_port()
        self.workdir = workdir
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0)

    def start(self) -> RedisServer:
        """Starts it (again, on the same port) and waits until it answers PING."""
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        with (self.workdir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        client = self.client()
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    raise TargetError(
                        f"redis-server exited with code {self.proc.returncode} "
                        f"(log: {self.workdir / 'redis.log'})"
                    ) from None
                if time.monotonic() > deadline:
                    self.kill()
                    raise TargetError(
                        f"redis-server did not answer in {self.startup_timeout_s:.0f} s"
                    ) from None
                time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()
