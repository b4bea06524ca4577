"""Static checks of one PromQL expression: the mistakes a review should catch.

Rules (each a `Finding.rule`):
- `parse`: not PromQL.
- `unknown-metric`: a name neither in the catalogue nor recorded by a rule (a typo, or a
  name the exporters do not have).
- `removed-metric`: a vLLM name vLLM has removed (e.g. vllm:gpu_cache_usage_perc).
- `counter-function-on-gauge`: rate/irate/increase/resets over a gauge. The seed's
  `sum(rate(llm_request_queue_depth[1m]))` is meaningless: a queue that drains gives a
  negative "rate" and a full queue that stays full gives 0.
- `gauge-function-on-counter`: delta/idelta/deriv over a counter (they ignore resets).
- `range-too-short`: a rate()-style window shorter than four scrape intervals returns
  nothing or one noisy pair (the seed's `rate(llm_request_total[10s])`).
- `quantile-without-le`: histogram_quantile over an aggregation that drops `le`.
- `keda-several-series`: a KEDA trigger whose top level can return more than one series;
  KEDA's Prometheus scaler fails on those. Aggregate to one (`sum(...)`, `max(...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import promql_parser as pp

from burstguard.deploycheck.catalogue import Catalogue
from burstguard.deploycheck.expressions import Expression

COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase", "resets"})
GAUGE_FUNCTIONS = frozenset({"delta", "idelta", "deriv", "predict_linear"})
ONE_SERIES_AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "quantile"}
)
MIN_SCRAPES_PER_WINDOW = 4


@dataclass(frozen=True, slots=True)
class Finding:
    where: str
    expr: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.rule}: {self.message}\n    {self.expr}"


def selector_names(node: pp.Expr) -> list[str]:
    """Metric names of every vector selector in an expression (in order, repeated)."""
    names: list[str] = []

    def visit(n: pp.Expr) -> None:
        if isinstance(n, pp.VectorSelector):
            name = metric_name(n)
            if name:
                names.append(name)

    pp.walk(node, pre_visit=visit)
    return names


def metric_name(sel: pp.VectorSelector) -> str | None:
    if sel.name:
        return str(sel.name)
    for m in sel.matchers.matchers:
        if m.name == "__name__" and m.op == pp.MatchOp.Equal:
            return str(m.value)
    return None


def check(
    e: Expression,
    catalogue: Catalogue,
    recorded: Collection[str] = (),
    scrape_interval_s: float = 30.0,
) -> list[Finding]:
    """Every finding for one expression (empty: it passes)."""
    try:
        tree = pp.parse(e.expr)
    except ValueError as exc:
        return [Finding(e.where, e.expr, "parse", str(exc))]
    found: list[Finding] = []

    def add(rule: str, message: str) -> None:
        found.append(Finding(e.where, e.expr, rule, message))

    for name in dict.fromkeys(selector_names(tree)):
        if name in catalogue.removed:
            add("removed-metric", f"{name} no longer exists in vLLM; use {catalogue.removed[name]}")
        elif name not in recorded and catalogue.lookup(name) is None:
            add("unknown-metric", f"{name} is neither in the metric catalogue nor recorded")

    def sample_type(name: str) -> str | None:
        if name in recorded:
            return "gauge"  # a recorded series is a gauge, whatever it was computed from
        hit = catalogue.lookup(name)
        return hit[1] if hit else None

    def visit(n: pp.Expr) -> None:
        if isinstance(n, pp.Call):
            _check_call(n, sample_type, scrape_interval_s, add)

    pp.walk(tree, pre_visit=visit)
    if e.kind == "keda" and not one_series(tree):
        add(
            "keda-several-series",
            "KEDA needs exactly one series: wrap the query in sum(...) or max(...) "
            "with no `by` clause",
        )
    return found


def _check_call(
    n: pp.Call,
    sample_type: Callable[[str], str | None],
    scrape_interval_s: float,
    add: Callable[[str, str], None],
) -> None:
    """Counter/gauge functions used on the right type, long enough windows, `le` kept."""
    fn = n.func.name
    if fn in COUNTER_FUNCTIONS or fn in GAUGE_FUNCTIONS:
        arg = n.args[0]
        inner = arg.vector_selector if isinstance(arg, pp.MatrixSelector) else None
        if isinstance(arg, pp.SubqueryExpr) and isinstance(arg.expr, pp.VectorSelector):
            inner = arg.expr
        name = metric_name(inner) if inner is not None else None
        kind = sample_type(name) if name else None
        if fn in COUNTER_FUNCTIONS and kind == "gauge":
            add(
                "counter-function-on-gauge",
                f"{fn}() of {name}, a gauge: {fn}() is only for counters; use the gauge "
                f"itself, max_over_time({name}[1m]) or deriv({name}[1m])",
            )
        if fn in GAUGE_FUNCTIONS and kind == "counter":
            add("gauge-function-on-counter", f"{fn}() of {name}, a counter: use rate()")
        window = arg.range.total_seconds() if hasattr(arg, "range") else None
        if window is not None and window < MIN_SCRAPES_PER_WINDOW * scrape_interval_s:
            add(
                "range-too-short",
                f"{fn}() over {window:g} s: fewer than {MIN_SCRAPES_PER_WINDOW} scrapes at "
                f"the {scrape_interval_s:g} s scrape interval",
            )
    if fn == "histogram_quantile" and len(n.args) == 2:
        agg = _strip(n.args[1])
        if isinstance(agg, pp.AggregateExpr) and not _keeps_le(agg):
            add("quantile-without-le", "histogram_quantile() needs `le` kept: sum by (le, ...)")


def _keeps_le(agg: pp.AggregateExpr) -> bool:
    mod = agg.modifier
    if mod is None:
        return False
    labels = set(mod.labels)
    return ("le" in labels) == (mod.type == pp.AggModifierType.By)


def _strip(n: pp.Expr) -> pp.Expr:
    while isinstance(n, pp.ParenExpr):
        n = n.expr
    return n


def one_series(n: pp.Expr) -> bool:
    """True when the expression can return at most one series, whatever the data."""
    n = _strip(n)
    if isinstance(n, pp.AggregateExpr):
        by_nothing = n.modifier is None or (
            n.modifier.type == pp.AggModifierType.By and not n.modifier.labels
        )
        return str(n.op) in ONE_SERIES_AGGREGATIONS and by_nothing
    if isinstance(n, pp.UnaryExpr | pp.SubqueryExpr):
        return one_series(n.expr)  # a subquery of one series is one series over time
    if isinstance(n, pp.BinaryExpr):
        lhs, rhs = _strip(n.lhs), _strip(n.rhs)
        scalars = [isinstance(s, pp.NumberLiteral) for s in (lhs, rhs)]
        if all(scalars):
            return False  # a scalar, not the one-series vector KEDA reads
        return all(s or one_series(x) for s, x in zip(scalars, (lhs, rhs), strict=True))
    if isinstance(n, pp.Call):
        fn = n.func.name
        if fn == "vector":
            return True
        if fn == "histogram_quantile":
            agg = _strip(n.args[1])
            return (
                isinstance(agg, pp.AggregateExpr)
                and agg.modifier is not None
                and agg.modifier.type == pp.AggModifierType.By
                and set(agg.modifier.labels) == {"le"}
            )
        vectors = [
            a for a in n.args if not isinstance(_strip(a), pp.NumberLiteral | pp.StringLiteral)
        ]
        return len(vectors) == 1 and one_series(vectors[0])
    return False
