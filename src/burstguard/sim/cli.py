"""CLI: `burstguard sim` — replay a trace or a pattern on the engine model in virtual time."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from burstguard.engine.config import EngineConfig
from burstguard.engine.options import engine_options
from burstguard.engine.profile import Profile
from burstguard.errors import UserError
from burstguard.workload.options import pattern_options
from burstguard.workload.synth import PatternSpec


@pattern_options()
@engine_options
def sim(
    profile: Profile,
    engine_config: EngineConfig,
    pattern_spec: PatternSpec | None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Trace file (any analyze format).")
    ] = None,
    trace_format: Annotated[
        str | None, typer.Option("--format", help="Trace format override.")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the summary JSON here.")
    ] = None,
    records_out: Annotated[
        Path | None, typer.Option("--records", help="Write per-request JSONL here.")
    ] = None,
    slo: Annotated[
        str, typer.Option("--slo", help="SLO, e.g. ttft=0.5,tpot=0.05 (seconds).")
    ] = "ttft=0.5,tpot=0.05",
) -> None:
    """Simulate one engine on a workload; prints latency percentiles (engine time)."""
    from burstguard.bench.records import write_records
    from burstguard.bench.summary import Slo, summarize, write_summary
    from burstguard.sim.loop import simulate
    from burstguard.workload.synth import synthesize
    from burstguard.workload.traces import load_workload

    if (trace is None) == (pattern_spec is None):
        raise UserError("give exactly one of --trace FILE or --pattern NAME")
    try:
        slo_target = Slo.parse(slo)
    except ValueError as exc:
        raise UserError(f"--slo: {exc}") from None
    workload = load_workload(trace, trace_format) if trace else synthesize(pattern_spec)  # type: ignore[arg-type]
    if len(workload) == 0:
        raise UserError("the workload has no requests")
    result = simulate(workload, engine_config, profile)
    duration = float(workload.arrival_s[-1]) if len(workload) else 0.0
    if pattern_spec is not None:
        duration = pattern_spec.duration_s
    summary = summarize(
        result.records, duration_s=duration, slo=slo_target, source="sim",
        extra={"preemptions": result.preemptions, "steps": result.steps,
               "profile": profile.name, "engine": asdict(engine_config)},
    )  # fmt: skip
    if json_out:
        write_summary(json_out, summary)
    if records_out:
        write_records(records_out, result.records)
    t, e = summary["ttft_s"], summary["e2e_s"]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:.1f} ms"

    print(
        f"{summary['requests']} requests, {summary['completed']} completed, "
        f"{summary['errors']} rejected, {result.preemptions} preemptions\n"
        f"TTFT p50 {ms(t['p50'])}  p95 {ms(t['p95'])}  p99 {ms(t['p99'])}\n"
        f"E2E  p50 {ms(e['p50'])}  p95 {ms(e['p95'])}\n"
        f"SLO attainment {summary['slo_attainment']:.1%}"
    )


def register(app: typer.Typer) -> None:
    """Adds sim."""
    app.command()(sim)
