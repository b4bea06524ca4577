"""Run deploy/'s expressions against a real Prometheus and check what comes back.

For each expression:
- Prometheus must accept it and answer with an instant vector;
- every selector of a metric the running processes export (`gateway`, `engine`, or a
  recorded series) must match data: a wrong label value (`le="1"` for `le="1.0"`) or a
  misspelt name shows up here;
- KEDA triggers must return exactly one series; recording rules and dashboard targets at
  least one; alerts may be empty (they are not firing);
- an aggregation `by (labels)` must return series that carry those labels.
An expression that uses a metric no local process exports (source `vllm`, `external`,
`pending` in the catalogue) may come back empty: it is reported in `allowed_empty`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import promql_parser as pp

from burstguard.deploycheck.catalogue import LIVE_SOURCES, Catalogue
from burstguard.deploycheck.expressions import Expression
from burstguard.deploycheck.lint import Finding, metric_name
from burstguard.deploycheck.prometheus import PrometheusAPI, PromQLError


@dataclass(slots=True)
class LiveReport:
    findings: list[Finding] = field(default_factory=list)
    series: dict[str, int] = field(default_factory=dict)
    """expression text -> number of series it returned."""
    allowed_empty: dict[str, list[str]] = field(default_factory=dict)
    """expression text -> the not-locally-exported metrics that excuse an empty result."""


def offline_metrics(tree: pp.Expr, catalogue: Catalogue, recorded: Collection[str]) -> list[str]:
    """Metrics in the expression that no local process exports."""
    names = []

    def visit(n: pp.Expr) -> None:
        if isinstance(n, pp.VectorSelector):
            name = metric_name(n)
            hit = catalogue.lookup(name) if name else None
            if name and name not in recorded and (hit is None or hit[0].source not in LIVE_SOURCES):
                names.append(name)

    pp.walk(tree, pre_visit=visit)
    return sorted(set(names))


def check_all(
    api: PrometheusAPI,
    expressions: Sequence[Expression],
    catalogue: Catalogue,
    recorded: Collection[str],
    at: float | None = None,
) -> LiveReport:
    report = LiveReport()
    selector_has_data: dict[str, bool] = {}
    for e in expressions:

        def add(rule: str, message: str, e: Expression = e) -> None:
            report.findings.append(Finding(e.where, e.expr, rule, message))

        try:
            kind, result = api.query(e.expr, at)
        except PromQLError as exc:
            add("prometheus-refused", str(exc))
            continue
        report.series[e.expr] = len(result)
        if kind != "vector":
            add("not-a-vector", f"Prometheus answered a {kind}, not an instant vector")
            continue
        tree = pp.parse(e.expr)
        for sel in _live_selectors(tree, catalogue, recorded):
            if sel not in selector_has_data:
                selector_has_data[sel] = bool(api.query(f"count({sel})", at)[1])
            if not selector_has_data[sel]:
                add("no-data", f"{sel} matches no series in Prometheus")
        offline = offline_metrics(tree, catalogue, recorded)
        if not result and e.kind != "alert":
            if offline:
                report.allowed_empty[e.expr] = offline
            else:
                add("empty", "no series returned, although every metric it uses is exported")
        if e.kind == "keda" and len(result) > 1:
            add("keda-several-series", f"{len(result)} series returned; KEDA needs exactly one")
        for label in _grouping_labels(tree):
            if any(label not in r["metric"] for r in result):
                add("missing-label", f"a series lacks the `{label}` label it is grouped by")
    return report


def _live_selectors(tree: pp.Expr, catalogue: Catalogue, recorded: Collection[str]) -> list[str]:
    """Selector texts (name and matchers) of locally exported or recorded metrics."""
    found: list[str] = []

    def visit(n: pp.Expr) -> None:
        if isinstance(n, pp.VectorSelector):
            name = metric_name(n)
            hit = catalogue.lookup(name) if name else None
            if name and (name in recorded or (hit and hit[0].source in LIVE_SOURCES)):
                found.append(_selector_text(n))

    pp.walk(tree, pre_visit=visit)
    return list(dict.fromkeys(found))


def _selector_text(sel: pp.VectorSelector) -> str:
    """The selector without offset/@ (count() of it must see current data)."""
    matchers = ", ".join(
        f'{m.name}{_OPS[str(m.op)]}"{m.value}"'
        for m in sel.matchers.matchers
        if m.name != "__name__"
    )
    return f"{metric_name(sel)}{{{matchers}}}"


_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


def _grouping_labels(tree: pp.Expr) -> list[str]:
    """The `by` labels of a top-level aggregation (inside parentheses), else none."""
    while isinstance(tree, pp.ParenExpr):
        tree = tree.expr
    mod = tree.modifier if isinstance(tree, pp.AggregateExpr) else None
    if mod is not None and mod.type == pp.AggModifierType.By:
        return list(mod.labels)
    return []
