"""What a scaling policy becomes in Kubernetes.

- `keda`: a KEDA ScaledObject with the Prometheus trigger the model evaluates (same query
  text, threshold, activation) and the HPA behavior under
  `advanced.horizontalPodAutoscalerConfig.behavior`.
- `predictive`: burstguard decides, Kubernetes obeys. The gateway exports
  `burstguard_desired_replicas`; a ScaledObject with an `AverageValue` target of 1 on
  `max(burstguard_desired_replicas)` makes the HPA ask for exactly that many replicas,
  and its own behavior is opened up (no stabilization, large steps, tolerance 0) so it
  adds no second delay on top of the policy's own scale-down window.
- `kpa`: a Knative Service's autoscaling annotations (Knative runs its own autoscaler).
"""

from __future__ import annotations

import re
from typing import Any

from burstguard.autoscale.config import ScalingPolicy
from burstguard.autoscale.hpa import Behavior, HpaScalingPolicy, ScalingRules
from burstguard.autoscale.keda import KedaParams
from burstguard.autoscale.kpa import KpaParams
from burstguard.autoscale.predictive import PredictiveParams
from burstguard.errors import ConfigError
from burstguard.wire.urls import normalize_backend_url

__all__ = ["DESIRED_REPLICAS_METRIC", "ExportTarget", "render"]

DESIRED_REPLICAS_METRIC = "burstguard_desired_replicas"

# the HPA obeys burstguard's count: no stabilization, any step within 15 s, no tolerance
_OBEY = Behavior(
    scale_up=ScalingRules(0, (HpaScalingPolicy("Percent", 1000, 15),), tolerance=0.0),
    scale_down=ScalingRules(0, (HpaScalingPolicy("Percent", 100, 15),), tolerance=0.0),
)


# a DNS-1123 label: what Kubernetes takes as a namespace and as a Knative Service's name
# (the stricter of the names these manifests carry)
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
"""The Prometheus Operator's service in namespace monitoring, as KEDA reaches it."""

_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class ExportTarget:
    """Where the manifests point: the workload to scale and the Prometheus to ask. Names
    and the URL are checked here (ConfigError naming the flag), so nothing is written that
    `kubectl apply` would refuse."""

    def __init__(
        self,
        name: str = "burstguard-engine",
        namespace: str = "default",
        prometheus: str = DEFAULT_PROMETHEUS,
        kind: str = "Deployment",
    ) -> None:
        for flag, value in (("--name", name), ("--namespace", namespace)):
            if not _K8S_NAME.fullmatch(value):
                raise ConfigError(
                    f"{flag} {value!r}: a Kubernetes name is 1-63 lower-case letters, digits "
                    "and '-', starting and ending with a letter or digit"
                )
        normalize_backend_url(prometheus, "--prometheus")  # an http(s)://host[:port] URL
        self.name, self.namespace, self.prometheus, self.kind = name, namespace, prometheus, kind


def render(policy: ScalingPolicy, target: ExportTarget) -> dict[str, dict[str, Any]]:
    """File name -> manifest (a dict ready for yaml.safe_dump)."""
    p = policy.params
    if isinstance(p, KedaParams):
        return {"scaledobject.yaml": _keda(p, target)}
    if isinstance(p, PredictiveParams):
        return {"scaledobject.yaml": _predictive(p, target)}
    return {"knative-service.yaml": _knative(p, target)}


def _scaled_object(
    target: ExportTarget,
    *,
    min_replicas: int,
    max_replicas: int,
    polling_s: float,
    cooldown_s: float,
    behavior: Behavior,
    trigger: dict[str, Any],
    initial_cooldown_s: float = 0.0,
) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": target.name, "namespace": target.namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": target.kind, "name": target.name},
            "pollingInterval": round(polling_s),
            "cooldownPeriod": round(cooldown_s),
            "initialCooldownPeriod": round(initial_cooldown_s),
            "minReplicaCount": min_replicas,
            "maxReplicaCount": max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(behavior)}},
            "triggers": [trigger],
        },
    }


def _keda(p: KedaParams, target: ExportTarget) -> dict[str, Any]:
    trigger = {
        "type": "prometheus",
        "metricType": p.target_type,
        "metadata": {
            "serverAddress": target.prometheus,
            "query": p.query.promql(p.scrape_interval_s),
            "threshold": _num(p.target),
            "activationThreshold": _num(p.activation_threshold),
            "ignoreNullValues": "true",
        },
    }
    return _scaled_object(
        target,
        min_replicas=p.min_replicas,
        max_replicas=p.max_replicas,
        polling_s=p.polling_interval_s,
        cooldown_s=p.cooldown_period_s,
        behavior=p.behavior,
        trigger=trigger,
        initial_cooldown_s=p.initial_cooldown_s,
    )


def _predictive(p: PredictiveParams, target: ExportTarget) -> dict[str, Any]:
    trigger = {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": target.prometheus,
            "query": f"max({DESIRED_REPLICAS_METRIC})",  # one series, even with N gateways
            "threshold": "1",
            "activationThreshold": "0",
            "ignoreNullValues": "false",  # no gateway, no answer: keep the count, don't drop
        },
    }
    return _scaled_object(
        target,
        min_replicas=p.min_replicas,
        max_replicas=p.max_replicas,
        polling_s=15,
        cooldown_s=p.scale_down_window_s,
        behavior=_OBEY,
        trigger=trigger,
    )


def _knative(p: KpaParams, target: ExportTarget) -> dict[str, Any]:
    prefix = "autoscaling.knative.dev/"
    annotations = {
        "class": "kpa.autoscaling.knative.dev",
        "metric": "concurrency",
        "target": _num(p.target_concurrency),
        "target-utilization-percentage": _num(p.target_utilization * 100),
        "window": f"{round(p.stable_window_s)}s",
        "panic-window-percentage": _num(100 * p.panic_window_s / p.stable_window_s),
        "panic-threshold-percentage": _num(p.panic_threshold * 100),
        "min-scale": str(p.min_replicas),
        "max-scale": str(p.max_replicas),
        "scale-down-delay": f"{round(p.scale_down_delay_s)}s",
    }
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": target.name, "namespace": target.namespace},
        "spec": {
            "template": {
                "metadata": {"annotations": {prefix + k: v for k, v in annotations.items()}},
                "spec": {"containers": [{"image": "REPLACE-with-your-engine-image"}]},
            }
        },
    }


def _behavior(b: Behavior) -> dict[str, Any]:
    return {"scaleUp": _rules(b.scale_up), "scaleDown": _rules(b.scale_down)}


def _rules(r: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {
        "stabilizationWindowSeconds": r.stabilization_window_s,
        "selectPolicy": r.select_policy,
        "policies": [
            {"type": p.type, "value": p.value, "periodSeconds": p.period_s} for p in r.policies
        ],
    }
    if r.tolerance != 0.1:  # a per-HPA tolerance needs HPAConfigurableTolerance (k8s >= 1.33)
        out["tolerance"] = _num(r.tolerance)
    return out


def _num(x: float) -> str:
    """A number as KEDA metadata wants it: a string, no trailing .0."""
    return f"{x:g}"
