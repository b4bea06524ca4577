"""CLI: `burstguard deploy check` and `burstguard deploy snapshot`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from burstguard.errors import UserError

app = typer.Typer(help="Check deploy/ (manifests, PromQL) and picture its dashboard.")

DeployDir = Annotated[
    Path,
    typer.Option("--deploy-dir", help="The kustomize tree (base, components, overlays, crds)."),
]


@app.command()
def check(
    deploy_dir: DeployDir = Path("deploy"),
    prometheus: Annotated[
        str | None,
        typer.Option(help="Also run every expression against this Prometheus (base URL)."),
    ] = None,
) -> None:
    """Render every overlay, validate it, lint every PromQL expression (and run them)."""
    from burstguard.deploycheck import catalogue, live, tree
    from burstguard.deploycheck.prometheus import PrometheusAPI

    if not (deploy_dir / "overlays").is_dir():
        raise UserError(f"--deploy-dir: {deploy_dir} has no overlays/ folder")
    cat = catalogue.load()
    checked = tree.check_tree(deploy_dir, cat)
    problems = list(checked.problems)
    if prometheus:
        report = live.check_all(
            PrometheusAPI(prometheus), checked.expressions, cat, checked.recorded
        )
        problems += [str(f) for f in report.findings]
        for expr, names in report.allowed_empty.items():
            typer.echo(f"empty (not exported here: {', '.join(names)}): {expr}")
    n = sum(len(d) for d in checked.rendered.values())
    typer.echo(
        f"{len(checked.rendered)} overlays, {n} objects, {len(checked.expressions)} expressions "
        f"(scrape interval {checked.scrape_interval_s:g} s; vLLM names of {cat.vllm_version})"
    )
    for p in problems:
        typer.echo(p, err=True)
    if problems:
        typer.echo(f"{len(problems)} problem(s)", err=True)
        raise typer.Exit(1)
    typer.echo("ok")


@app.command()
def snapshot(
    out: Annotated[Path, typer.Option(help="PNG to write.")] = Path("dashboard.png"),
    deploy_dir: DeployDir = Path("deploy"),
    overlay: Annotated[
        str, typer.Option(help="Overlay whose config and rules run.")
    ] = "single-engine",
    duration: Annotated[float, typer.Option(help="Seconds of bursty traffic.")] = 30.0,
    workdir: Annotated[
        Path | None, typer.Option(help="Keep logs and Prometheus data here (default: temp).")
    ] = None,
) -> None:
    """Run a burst through a local gateway + two emulators, scraped by a real Prometheus
    with the overlay's rules, and plot the dashboard's main panels from its queries."""
    import tempfile
    import time

    from burstguard.deploycheck import figure, stack

    overlay_dir = deploy_dir / "overlays" / overlay
    if not overlay_dir.is_dir():
        raise UserError(f"--overlay: {overlay_dir} does not exist")
    if duration <= 0:
        raise UserError("--duration must be > 0")
    with tempfile.TemporaryDirectory(prefix="burstguard-snapshot-") as tmp:
        wd = workdir or Path(tmp)
        typer.echo(f"starting 2 emulators, the gateway and Prometheus (logs in {wd})")
        with stack.running(overlay_dir, wd) as s:
            start = time.time()
            typer.echo(f"bursting for {duration:g} s ...")
            stack.burst(s, wd, duration_s=duration)
            time.sleep(3)  # a last scrape and rule evaluation after the tail
            figure.render(s.api, s.docs, start - 5, time.time(), out)
    typer.echo(f"wrote {out}")


def register(root: typer.Typer) -> None:
    """Adds `deploy`."""
    root.add_typer(app, name="deploy")
