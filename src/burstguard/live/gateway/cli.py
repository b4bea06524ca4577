"""CLI: `burstguard gateway` — the burst-absorbing reverse proxy in front of an engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.errors import UserError

if TYPE_CHECKING:
    from burstguard.core.gateway.config import GatewayConfig


def load_config(
    config: Path | None, backends: list[str] | None, host: str | None, port: int | None,
    metrics_listen: str | None = None,
) -> GatewayConfig:  # fmt: skip
    """The config file (or the defaults) with the command-line flags laid over it.

    `--backend URL` (repeatable) replaces the config's list of backends: the first keeps
    the first entry's settings (timeouts, resume), the others copy them. `--metrics-listen
    HOST:PORT` sets `metrics.listen`."""
    from burstguard.core.fleet.config import check_backend_urls
    from burstguard.core.gateway.config import GatewayConfig

    data: dict[str, Any] = {}
    source = "gateway flags"
    if config is not None:
        base = GatewayConfig.load(config)  # validates the file on its own first
        data = base.model_dump(mode="python", exclude_unset=True)
        source = str(config)
    if backends:
        check_backend_urls(backends, "--backend", flag=True)  # named as typed
        given = [dict(b) for b in data.get("backends", ())]
        template = {k: v for k, v in (given[0] if given else {}).items() if k != "metrics_url"}
        data["backends"] = [{**template, "url": url} for url in backends]
    listen = dict(data.get("listen", {}))
    if host is not None:
        listen["host"] = host
    if port is not None:
        listen["port"] = port
    data["listen"] = listen
    if metrics_listen is not None:
        at_host, _, at_port = metrics_listen.rpartition(":")
        if not at_host or not at_port.isdigit():
            raise UserError(f"--metrics-listen: {metrics_listen!r} is not HOST:PORT")
        metrics = dict(data.get("metrics", {}))
        metrics["listen"] = {"host": at_host.strip("[]"), "port": int(at_port)}
        data["metrics"] = metrics
    cfg = GatewayConfig.from_dict(data, source=source)
    discovery = cfg.fleet.discovery
    if not cfg.backends and discovery.dns is None and discovery.file is None:
        raise UserError(
            f"{source}: backends: no backend configured (pass --backend URL, or set "
            "fleet.discovery.dns or fleet.discovery.file)"
        )
    return cfg


def gateway(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Gateway config (YAML).")
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option(help="Backend base URL; repeat for a fleet (replaces the config's backends)."),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT of a second listener serving only /metrics, /health "
            "and /ready (the main one then has no /metrics); metrics.listen."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Log level of the per-request log.")] = "info",
) -> None:
    """Serve the burst-absorbing gateway: queue, order, admit, shed and route over engines."""
    import asyncio
    import logging
    import sys

    import uvloop

    from burstguard.live.gateway.server import Gateway

    cfg = load_config(config, backend, host, port, metrics_listen)
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise UserError(f"--log-level: {log_level!r} is not a log level (debug, info, warning)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("burstguard.core.gateway")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    url = f"http://{cfg.listen.host}:{cfg.listen.port}"

    gw = Gateway(cfg)

    def ready() -> None:
        names = ", ".join(f"{gw.backend_name(u)}={u}" for u in cfg.backend_urls())
        at = cfg.metrics.listen
        metrics = f"; /metrics on http://{at.host}:{at.port}" if at is not None else ""
        print(f"burstguard gateway on {url} -> {names or 'discovered backends'}; prompt "
              f"tokens: {gw.prompt_counters.describe()}{metrics}", flush=True)  # fmt: skip

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(gw.run(on_ready=ready))
    except OSError as exc:
        raise UserError(f"cannot listen on {cfg.listen.host}:{cfg.listen.port}: {exc}") from exc


def register(app: typer.Typer) -> None:
    """Adds gateway."""
    app.command()(gateway)
