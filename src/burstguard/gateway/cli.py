"""CLI: `burstguard gateway` — the burst-absorbing reverse proxy in front of an engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.errors import UserError

if TYPE_CHECKING:
    from burstguard.gateway.config import GatewayConfig


def load_config(
    config: Path | None, backend: str | None, host: str | None, port: int | None
) -> GatewayConfig:
    """The config file (or the defaults) with the command-line flags laid over it."""
    from burstguard.gateway.config import GatewayConfig

    data: dict[str, Any] = {}
    source = "gateway flags"
    if config is not None:
        base = GatewayConfig.load(config)  # validates the file on its own first
        data = base.model_dump(mode="python", exclude_unset=True)
        source = str(config)
    if backend is not None:
        if not backend.startswith(("http://", "https://")):
            raise UserError(f"--backend: {backend!r} is not an http:// or https:// URL")
        backends = [dict(b) for b in data.get("backends", ())]
        if backends:
            backends[0]["url"] = backend
        else:
            backends = [{"url": backend}]
        data["backends"] = backends
    listen = dict(data.get("listen", {}))
    if host is not None:
        listen["host"] = host
    if port is not None:
        listen["port"] = port
    data["listen"] = listen
    cfg = GatewayConfig.from_dict(data, source=source)
    if not cfg.backends:
        raise UserError(f"{source}: backends: no backend configured (pass --backend URL)")
    if len(cfg.backends) > 1:  # refused, not silently served by the first alone
        raise UserError(
            f"{source}: backends: one backend per gateway (got {len(cfg.backends)}): its "
            "admission follows that engine's own metrics; run a gateway per engine replica"
        )
    return cfg


def gateway(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Gateway config (YAML).")
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="Backend base URL (overrides the config's backend).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    log_level: Annotated[str, typer.Option(help="Log level of the per-request log.")] = "info",
) -> None:
    """Serve the burst-absorbing gateway: queue, order, admit and shed in front of an engine."""
    import asyncio
    import logging
    import sys

    import uvloop

    from burstguard.gateway.server import Gateway

    cfg = load_config(config, backend, host, port)
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise UserError(f"--log-level: {log_level!r} is not a log level (debug, info, warning)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("burstguard.gateway")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    url = f"http://{cfg.listen.host}:{cfg.listen.port}"

    gw = Gateway(cfg)

    def ready() -> None:
        print(f"burstguard gateway on {url} -> {cfg.backends[0].url}; prompt tokens: "
              f"{gw.prompt_counters.describe()}", flush=True)  # fmt: skip

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(gw.run(on_ready=ready))
    except OSError as exc:
        raise UserError(f"cannot listen on {cfg.listen.host}:{cfg.listen.port}: {exc}") from exc


def register(app: typer.Typer) -> None:
    """Adds gateway."""
    app.command()(gateway)
