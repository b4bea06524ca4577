"""CLI: `burstguard scaling` — list the built-in policies, show one, export one to Kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from burstguard.autoscale.export import DEFAULT_PROMETHEUS
from burstguard.errors import UserError, check_writable

scaling_app = typer.Typer(
    help="Autoscaling policies: list the presets, export one as Kubernetes manifests.",
    no_args_is_help=True,
)

_POLICY_HELP = "A preset (keda-queue, keda-rate, kpa, predictive) or a policy YAML file."


@scaling_app.command("presets")
def presets_cmd() -> None:
    """List the built-in scaling policies with their one-line description."""
    from burstguard.autoscale.config import PRESETS, load_policy

    for name in PRESETS:
        print(f"{name:12s} {load_policy(name).description}")


@scaling_app.command("show")
def show_cmd(policy: Annotated[str, typer.Argument(help=_POLICY_HELP)]) -> None:
    """Print POLICY with every field and default: a starting point for your own file."""
    from burstguard.autoscale.config import load_policy

    print(load_policy(policy).to_yaml(), end="")


@scaling_app.command("export")
def export_cmd(
    policy: Annotated[str, typer.Argument(help=_POLICY_HELP)],
    out: Annotated[Path, typer.Option("--out", help="Directory to write the manifests to.")],
    name: Annotated[
        str, typer.Option("--name", help="The Deployment to scale (and the object's name).")
    ] = "burstguard-engine",
    namespace: Annotated[
        str, typer.Option("--namespace", help="Kubernetes namespace.")
    ] = "default",
    prometheus: Annotated[
        str,
        typer.Option(
            "--prometheus",
            help="Prometheus URL as KEDA reaches it (default: the Prometheus Operator's "
            "service prometheus-operated in namespace monitoring, port 9090).",
            show_default=False,
        ),
    ] = DEFAULT_PROMETHEUS,
    min_replicas: Annotated[
        int | None, typer.Option("--min-replicas", help="Override the policy's minimum.")
    ] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", help="Override the policy's maximum.")
    ] = None,
) -> None:
    """Write POLICY as Kubernetes manifests: a KEDA ScaledObject, or Knative annotations.

    keda policies: the Prometheus trigger and the HPA behavior; predictive: a trigger on
    burstguard_desired_replicas (the gateway's decision); kpa: a Knative Service."""
    from burstguard.autoscale.config import load_policy
    from burstguard.autoscale.export import ExportTarget, render

    loaded = load_policy(policy).with_overrides(
        min_replicas=min_replicas, max_replicas=max_replicas
    )
    manifests = render(loaded, ExportTarget(name, namespace, prometheus))
    try:
        out.mkdir(parents=True, exist_ok=True)
        for file_name, manifest in manifests.items():
            path = out / file_name
            header = f"# burstguard scaling export {policy} ({loaded.kind}); docs/autoscaling.md\n"
            path.write_text(header + yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
            print(f"wrote {path}")
    except OSError as exc:
        raise UserError(f"{out}: cannot write the manifests ({exc.strerror})") from None


def fleet_cmd(
    policy: Annotated[str, typer.Option("--policy", help=_POLICY_HELP)],
    gateway: Annotated[
        str,
        typer.Option("--gateway", help="the gateway's base URL (its /metrics drives the policy)"),
    ],
    backend_file: Annotated[
        Path,
        typer.Option("--file", help="backend list the gateway watches (fleet.discovery.file)"),
    ],
    profile: Annotated[str, typer.Option("--profile", help="each emulator's profile")] = (
        "llama3-8b-h100"
    ),
    max_num_seqs: Annotated[
        int, typer.Option("--max-num-seqs", min=1, help="each emulator's slots")
    ] = 256,
    speedup: Annotated[
        float, typer.Option("--speedup", min=0.01, help="emulator speedup; times are engine s")
    ] = 1.0,
    min_replicas: Annotated[
        int | None, typer.Option("--min-replicas", help="override the policy's minimum")
    ] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", help="override the policy's maximum")
    ] = None,
    cold_start_s: Annotated[
        float | None, typer.Option("--cold-start-s", help="fixed cold start (engine s)")
    ] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", help="wall seconds to run (default: until ^C)")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the fleet's books here at the end")
    ] = None,
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="emulator logs")] = None,
    spares: Annotated[
        int | None,
        typer.Option(
            "--spares",
            min=0,
            help="emulator processes kept started for scale-ups, so that a new replica "
            "waits the modelled cold start only (default: max - min replicas, at most 4)",
        ),
    ] = None,
    start_at: Annotated[
        float | None,
        typer.Option(
            "--start-at",
            help="Unix time of engine time zero (line up with `burstguard bench "
            "--start-at`); default: once the first replicas serve",
        ),
    ] = None,
) -> None:
    """Run a local fleet: emulator processes as replicas, sized by POLICY from the
    gateway's metrics, each joining the backend file after a simulated cold start."""
    import asyncio
    import json
    import signal
    import sys

    from burstguard.autoscale.config import load_policy
    from burstguard.autoscale.local_fleet import LocalFleet
    from burstguard.clock import check_start_at, monotonic_at
    from burstguard.wire.urls import normalize_backend_url

    scaling = load_policy(policy).with_overrides(
        min_replicas=min_replicas, max_replicas=max_replicas, cold_start_s=cold_start_s
    )
    if scaling.min_replicas < 1:
        raise UserError("--min-replicas: a local fleet keeps at least one replica")
    check_start_at(start_at)
    if spares is None:
        spares = min(scaling.max_replicas - scaling.min_replicas, 4)
    normalize_backend_url(gateway, "--gateway")
    if duration is not None and not duration > 0:
        raise UserError(f"--duration must be > 0 (got {duration:g}; leave it out to run until ^C)")
    check_writable(backend_file, "--file")
    if json_out is not None:
        check_writable(json_out, "--json")
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", profile,
                "--host", "127.0.0.1", "--port", str(port), "--speedup", str(speedup),
                "--max-num-seqs", str(max_num_seqs)]  # fmt: skip

    async def main() -> dict[str, Any]:
        fleet = LocalFleet(
            scaling, backend_file, gateway, argv, speedup=speedup, log_dir=log_dir,
            spares=spares, origin=None if start_at is None else monotonic_at(start_at),
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # stop cleanly: the books are written
            loop.add_signal_handler(sig, fleet.stop)
        return await fleet.run(duration)

    books = asyncio.run(main())
    print(
        f"replica-seconds {books['replica_seconds']:.0f} (engine), scale events "
        f"{len(books['scale_events'])}, ready max {max(books['replicas']['ready'])}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(books, indent=2) + "\n", encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Adds `scaling` (presets, show, export) and `fleet`."""
    app.add_typer(scaling_app, name="scaling")
    app.command("fleet")(fleet_cmd)
