"""CLI: `burstguard diagnose RUN...` — the seed's troubleshooting order over recorded runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from burstguard.diagnose.steps import Finding
from burstguard.diagnose.walk import Diagnosis
from burstguard.errors import UserError

_MARK = {"found": "FOUND", "not_found": "ok", "cannot_tell": "cannot tell"}


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value) or "-"
    return str(value)


def render(d: Diagnosis) -> str:
    """The diagnosis as text: each step, its evidence in numbers, the fixes it calls for."""
    lines = [f"{d.run} ({d.source})"]
    for i, f in enumerate(d.findings, 1):
        lines.append(f"  {i}. {f.step:<15} {_MARK[f.status]:<12} {f.summary}")
        if f.status == "found":
            shown = {k: v for k, v in f.evidence.items() if v is not None and v != []}
            lines += [f"       {k}: {_fmt(v)}" for k, v in shown.items()]
        lines += [f"       missing: {m}" for m in f.missing]
    for q in d.over_quota:
        share = q["share_of_429"]
        of = f": {share:.0%} of the 429s" if share is not None else ""
        lines.append(f"  over quota: tenant {q['tenant']!r} ({q['refused_requests']} requests, "
                     f"{q['refused_tokens']} tokens refused by its quota{of})")  # fmt: skip
    lines.append(f"  first cause: {d.first_cause or 'none found'}")
    cause: Finding | None = (
        next(f for f in d.findings if f.step == d.first_cause) if d.first_cause else None
    )
    if cause is not None:
        lines.append("  fix:")
        lines += [f"    [{x.where}] {x.flag} {x.value}: {x.why}" for x in cause.fixes]
    return "\n".join(lines)


def diagnose_cmd(
    runs: Annotated[
        list[Path],
        typer.Argument(help="bench run dirs (or a --scenario dir), or `sim --json` files"),
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="print JSON: one object, or a list for several runs")
    ] = False,
) -> None:
    """Walk the seed's order (retry storm, queue, batch building, KV memory, scaling lag)
    over recorded runs: found / not found / cannot tell, evidence, and the fix."""
    from burstguard.diagnose.run import expand, load
    from burstguard.diagnose.walk import diagnose

    try:
        paths = [leg for p in runs for leg in expand(p)]
        results = [diagnose(load(p)) for p in paths]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if json_out:
        objs = [r.to_dict() for r in results]
        print(json.dumps(objs[0] if len(objs) == 1 else objs, indent=2))
        return
    print("\n\n".join(render(r) for r in results))


def register(app: typer.Typer) -> None:
    """Adds diagnose."""
    app.command("diagnose")(diagnose_cmd)
