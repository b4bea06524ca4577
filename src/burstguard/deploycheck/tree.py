"""Check a whole deploy/ tree: render every overlay, validate, lint every expression."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burstguard.deploycheck import expressions as exprs
from burstguard.deploycheck import lint, manifests
from burstguard.deploycheck.catalogue import Catalogue
from burstguard.deploycheck.expressions import Expression


@dataclass(slots=True)
class TreeCheck:
    rendered: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """overlay name -> its rendered objects."""
    expressions: list[Expression] = field(default_factory=list)
    """Every distinct expression over all overlays (first place it was found)."""
    recorded: set[str] = field(default_factory=set)
    scrape_interval_s: float = exprs.DEFAULT_SCRAPE_INTERVAL_S
    problems: list[str] = field(default_factory=list)
    """Schema errors and lint findings; empty: the tree passes."""


def check_tree(deploy_dir: Path, catalogue: Catalogue) -> TreeCheck:
    out = TreeCheck()
    crds = manifests.CrdSchemas.from_dir(deploy_dir / "crds")
    seen: set[tuple[str, str]] = set()
    intervals = []
    for overlay in manifests.overlays(deploy_dir):
        docs = manifests.render(overlay)
        out.rendered[overlay.name] = docs
        for doc in docs:
            out.problems += [f"{overlay.name}: {p}" for p in manifests.validate(doc, crds)]
        intervals.append(exprs.scrape_interval_s(docs))
        for e in exprs.extract(docs):
            if (e.kind, e.expr) not in seen:
                seen.add((e.kind, e.expr))
                out.expressions.append(e)
    out.recorded = {e.record for e in out.expressions if e.record}
    out.scrape_interval_s = max(intervals, default=out.scrape_interval_s)
    for e in out.expressions:
        found = lint.check(e, catalogue, out.recorded, out.scrape_interval_s)
        out.problems += [str(f) for f in found]
    return out
