"""Every PromQL expression inside rendered manifests, with where it came from.

Sources: KEDA ScaledObjects (prometheus triggers), PrometheusRules (recording and alerting
rules) and Grafana dashboards shipped as ConfigMaps (every panel target). Also the
scrape intervals of ServiceMonitors and PodMonitors, which bound the shortest sensible
range window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["keda", "record", "alert", "panel"]
Doc = Mapping[str, Any]
DEFAULT_SCRAPE_INTERVAL_S = 30.0
"""prometheus-operator's default when an endpoint sets no interval."""


@dataclass(frozen=True, slots=True)
class Expression:
    kind: Kind
    where: str
    expr: str
    record: str | None = None
    """For a recording rule, the series it writes."""


def extract(docs: Iterable[Doc]) -> list[Expression]:
    """The expressions of every ScaledObject, PrometheusRule and dashboard in `docs`."""
    found: list[Expression] = []
    for doc in docs:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name", "?")
        spec = doc.get("spec") or {}
        if kind == "ScaledObject":
            for i, trig in enumerate(spec.get("triggers", ())):
                if trig.get("type") == "prometheus":
                    label = trig.get("name", str(i))
                    query = trig.get("metadata", {}).get("query", "")
                    found.append(Expression("keda", f"ScaledObject/{name} {label}", query.strip()))
        elif kind == "PrometheusRule":
            found.extend(rule_expressions(spec, f"PrometheusRule/{name}"))
        elif kind == "ConfigMap":
            for key, text in (doc.get("data") or {}).items():
                if key.endswith(".json"):
                    found.extend(dashboard_expressions(json.loads(text), f"{name}/{key}"))
    return found


def rule_expressions(spec: Mapping[str, Any], where: str) -> list[Expression]:
    """Recording and alerting rules of a PrometheusRule spec (or a Prometheus rules file)."""
    found = []
    for group in spec.get("groups", ()):
        for rule in group.get("rules", ()):
            expr = str(rule["expr"]).strip()
            if "record" in rule:
                place = f"{where} {group['name']} record {rule['record']}"
                found.append(Expression("record", place, expr, record=rule["record"]))
            else:
                found.append(Expression("alert", f"{where} alert {rule['alert']}", expr))
    return found


def dashboard_expressions(dashboard: Mapping[str, Any], where: str) -> list[Expression]:
    """Every target of every panel (rows' nested panels included)."""
    found = []
    for panel in _panels(dashboard.get("panels", ())):
        for target in panel.get("targets", ()):
            if target.get("expr"):
                place = f"{where} panel {panel.get('title', '?')!r} {target.get('refId', '?')}"
                found.append(Expression("panel", place, str(target["expr"]).strip()))
    return found


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", ()))


def rules_file(docs: Iterable[Doc]) -> dict[str, Any]:
    """All PrometheusRules' groups as one Prometheus rules file (what promtool reads)."""
    groups = [g for d in docs if d.get("kind") == "PrometheusRule" for g in d["spec"]["groups"]]
    return {"groups": groups}


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def scrape_interval_s(docs: Iterable[Doc]) -> float:
    """The longest scrape interval of the ServiceMonitors and PodMonitors in `docs`."""
    intervals = []
    for doc in docs:
        spec = doc.get("spec") or {}
        endpoints = {"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}
        key = endpoints.get(str(doc.get("kind")))
        for ep in spec.get(key, ()) if key else ():
            interval = ep.get("interval")
            intervals.append(parse_duration_s(interval) if interval else DEFAULT_SCRAPE_INTERVAL_S)
    return max(intervals, default=DEFAULT_SCRAPE_INTERVAL_S)


def parse_duration_s(text: str) -> float:
    """Prometheus durations such as 30s, 1m30s, 500ms."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a Prometheus duration")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)
