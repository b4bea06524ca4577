"""CLI: `burstguard sim` — replay a trace or a pattern on the engine model in virtual time,
optionally behind the gateway's policies (`--gateway gateway.yaml`) to compare them first."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.engine.config import EngineConfig
from burstguard.engine.options import engine_options
from burstguard.engine.profile import Profile
from burstguard.errors import UserError
from burstguard.workload.options import pattern_options
from burstguard.workload.synth import PatternSpec

if TYPE_CHECKING:
    from burstguard.sim.loop import SimResult


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
    gateway: Annotated[
        Path | None,
        typer.Option(
            "--gateway", help="Gateway config (YAML): run its policies in front of the engine."
        ),
    ] = None,
    replicas: Annotated[
        int,
        typer.Option(
            "--replicas",
            min=1,
            max=1024,
            help="Engine replicas behind the gateway's router (needs --gateway).",
        ),
    ] = 1,
) -> None:
    """Simulate one engine (or, with --gateway, N replicas behind the gateway's router) on
    a workload; prints latency percentiles (engine time)."""
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
    gateway_config = None
    if replicas > 1 and gateway is None:
        raise UserError("--replicas: needs --gateway CONFIG (the router that spreads them)")
    if gateway is not None:  # before the workload: a bad config fails fast
        from burstguard.gateway.config import GatewayConfig

        gateway_config = GatewayConfig.load(gateway)
    workload = load_workload(trace, trace_format) if trace else synthesize(pattern_spec)  # type: ignore[arg-type]
    if len(workload) == 0:
        raise UserError("the workload has no requests")
    gateway_block: dict[str, Any] | None = None
    if gateway_config is not None:
        from burstguard.sim.gateway_loop import gateway_summary, simulate_gateway

        gw_result = simulate_gateway(workload, engine_config, profile, gateway_config, replicas)
        gateway_block = gateway_summary(gw_result, gateway_config, source=str(gateway))
        gateway_block["routed"] = gw_result.routed
        result: SimResult = gw_result
    else:
        result = simulate(workload, engine_config, profile)
    duration = float(workload.arrival_s[-1]) if len(workload) else 0.0
    if pattern_spec is not None:
        duration = pattern_spec.duration_s
    summary = summarize(
        result.records, duration_s=duration, slo=slo_target, source="sim",
        extra={"preemptions": result.preemptions, "steps": result.steps,
               "profile": profile.name, "engine": asdict(engine_config)},
    )  # fmt: skip
    if gateway_block is not None:
        summary["gateway"] = gateway_block
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
    if "gateway" in summary:
        print(class_table(summary))
        routed = summary["gateway"]["routed"] or {}
        if len(routed) > 1:
            total = sum(routed.values())
            print("routed: " + ", ".join(f"{u} {n} ({n / total:.1%})" for u, n in routed.items()))


def class_table(summary: dict[str, Any]) -> str:
    """Per-class outcomes and TTFT: the figures a policy comparison is about."""

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:.0f} ms"

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    rows = [f"{'class':<12} {'requests':>8} {'completed':>9} {'rejected':>8} {'preempted':>9} "
            f"{'TTFT p50':>9} {'TTFT p95':>9} {'SLO':>6} {'target':>7}"]  # fmt: skip
    for name, g in summary["gateway"]["classes"].items():
        b = summary["by_class"].get(name)
        t = b["ttft_s"] if b else {"p50": None, "p95": None}
        slo = b["slo_attainment"] if b else None
        rows.append(
            f"{name:<12} {g['requests']:>8} {g['completed']:>9} {g['rejected']:>8} "
            f"{g['preemptions']:>9} {ms(t['p50']):>9} {ms(t['p95']):>9} {pct(slo):>6} "
            f"{pct(g['ttft_target_attainment']):>7}"
        )
    gw = summary["gateway"]
    rows.append(f"gateway preemptions {gw['preemptions']}, "
                f"tokens prefilled again to resume them {gw['reprefill_tokens']:,}")  # fmt: skip
    return "\n".join(rows)


def register(app: typer.Typer) -> None:
    """Adds sim."""
    app.command()(sim)
