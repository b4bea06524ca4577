"""CLI: `burstguard epp` — the gateway's core as the Endpoint Picker of a Gateway API gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from burstguard.errors import UserError


def epp(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Gateway config (YAML).")
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option(help="Backend URL (IP:port); repeat for a pool (replaces the config's)."),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    grpc_port: Annotated[
        int | None, typer.Option(help="ext_proc and gRPC health port (default 9002).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="HTTP /metrics, /health, /ready port (default 9090).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Log level of the per-request log.")] = "info",
) -> None:
    """Serve the Endpoint Picker (Envoy ext_proc) for a Gateway API gateway.

    The gateway's queue, classes, fairness, admission, shedding and routing
    pick the engine for each request; Envoy holds it until then. No
    preemption with resume, none of the gateway's HTTP limits: docs/epp.md.
    """
    import asyncio
    import logging
    import sys

    try:
        from burstguard.live.epp.server import EndpointPicker
    except ImportError as exc:  # grpcio / xds-protos are the `epp` extra
        raise UserError(
            f"burstguard epp needs grpcio and xds-protos ({exc}): pip install 'burstguard[epp]'"
        ) from exc
    from burstguard.core.gateway.config import GatewayConfig
    from burstguard.live.gateway.cli import load_config

    cfg = load_config(config, backend, host, None)
    ports = {k: v for k, v in (("grpc_port", grpc_port), ("metrics_port", metrics_port))
             if v is not None}  # fmt: skip
    if ports:
        data = cfg.model_dump(mode="python", exclude_unset=True)
        data["epp"] = {**data.get("epp", {}), **ports}
        cfg = GatewayConfig.from_dict(data, source=str(config or "epp flags"))
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise UserError(f"--log-level: {log_level!r} is not a log level (debug, info, warning)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("burstguard.core.gateway")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False

    picker = EndpointPicker(cfg)

    def ready() -> None:
        names = ", ".join(b.url for b in cfg.backends) or "discovered backends"
        print(f"burstguard epp: ext_proc on {cfg.listen.host}:{picker.grpc_port}, metrics on "
              f"http://{cfg.listen.host}:{cfg.epp.metrics_port}/metrics -> {names}",
              flush=True)  # fmt: skip

    try:
        asyncio.run(picker.run(on_ready=ready))
    except OSError as exc:
        raise UserError(f"cannot listen on {cfg.listen.host}: {exc}") from exc
    except RuntimeError as exc:  # grpc's "Failed to bind"
        raise UserError(f"cannot serve ext_proc on {cfg.listen.host}:{cfg.epp.grpc_port}: "
                        f"{exc}") from exc  # fmt: skip


def register(app: typer.Typer) -> None:
    """Adds epp."""
    app.command()(epp)
