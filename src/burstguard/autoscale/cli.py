"""CLI: `burstguard scaling` — list the built-in policies, show one, export one to Kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from burstguard.errors import UserError

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
        str, typer.Option("--prometheus", help="Prometheus URL as KEDA reaches it.")
    ] = "http://prometheus-operated.monitoring.svc:9090",
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


def register(app: typer.Typer) -> None:
    """Adds `scaling` (presets, show, export)."""
    app.add_typer(scaling_app, name="scaling")
