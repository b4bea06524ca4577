"""CLI: `burstguard sim` — replay a trace or a pattern on the engine model in virtual time,
optionally behind the gateway's policies (`--gateway gateway.yaml`) to compare them first."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.engine_options import engine_options
from burstguard.errors import UserError, check_writable
from burstguard.sim.defaults import MAX_REPLICAS, fleet_gateway
from burstguard.workload.options import TraceFileOption, TraceFormatOption, pattern_options
from burstguard.workload.synth import PatternSpec

if TYPE_CHECKING:
    from burstguard.core.gateway.config import GatewayConfig
    from burstguard.core.scaling import ScalingPolicy
    from burstguard.sim.client_retries import ClientRetry
    from burstguard.sim.faults import Fault
    from burstguard.sim.loop import SimResult
    from burstguard.wire.summary import Slo
    from burstguard.workload.spec import Workload


@pattern_options()
@engine_options
def sim(
    profile: Profile,
    engine_config: EngineConfig,
    pattern_spec: PatternSpec | None,
    shape_spec: PatternSpec,
    trace: TraceFileOption = None,
    trace_format: TraceFormatOption = None,
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
    epp: Annotated[
        bool,
        typer.Option(
            "--epp",
            help="Run --gateway's config as `burstguard epp` runs it behind Envoy "
            "(no resume; `epp.preempt: end` ends preempted requests with an error).",
        ),
    ] = False,
    retry: Annotated[
        str,
        typer.Option(
            "--retry",
            help="The clients send a request that ended with a retryable error again, as "
            "`bench --retry`: none, immediate or exponential (0.5-8 s full jitter, "
            "Retry-After honoured); needs --gateway or --autoscaler.",
        ),
    ] = "none",
    max_retries: Annotated[
        int, typer.Option("--max-retries", min=0, help="Retries per request (with --retry).")
    ] = 3,
    retry_budget: Annotated[
        float | None,
        typer.Option("--retry-budget", min=0, help="Max retries per request, e.g. 0.2."),
    ] = None,
    replicas: Annotated[
        int,
        typer.Option(
            "--replicas",
            min=0,
            max=MAX_REPLICAS,
            help="Engine replicas behind the gateway's router (needs --gateway or "
            "--autoscaler); with --autoscaler, the count it starts from (default: its minimum).",
        ),
    ] = 0,
    autoscaler: Annotated[
        str | None,
        typer.Option(
            "--autoscaler",
            help="Scale the replicas with this policy: a preset (keda-queue, keda-rate, kpa, "
            "predictive) or a policy YAML file (`burstguard scaling show NAME`).",
            rich_help_panel="Autoscaling",
        ),
    ] = None,
    min_replicas: Annotated[
        int | None,
        typer.Option(
            "--min-replicas", help="Override the policy's minimum.", rich_help_panel="Autoscaling"
        ),
    ] = None,
    max_replicas: Annotated[
        int | None,
        typer.Option(
            "--max-replicas", help="Override the policy's maximum.", rich_help_panel="Autoscaling"
        ),
    ] = None,
    cold_start_s: Annotated[
        float | None,
        typer.Option(
            "--cold-start-s",
            help="A fixed cold start instead of the policy's distribution (seconds).",
            rich_help_panel="Autoscaling",
        ),
    ] = None,
    hop_latency_s: Annotated[
        float,
        typer.Option(
            "--hop-latency-s",
            min=0.0,
            help="Open loop: the serving path's per-request latency outside the engine "
            "(HTTP hops through the gateway and back, in engine seconds), added to every "
            "TTFT and end-to-end time. Measure it as a lone request's TTFT through your "
            "gateway minus the simulator's; 0 models the engine and gateway policies only.",
        ),
    ] = 0.0,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Closed loop: N users (the seed's steady leg: 32)."),
    ] = None,
    think_time: Annotated[
        float, typer.Option("--think-time", help="Closed loop: seconds between a user's requests.")
    ] = 0.0,
    ramp_up: Annotated[
        float | None,
        typer.Option(
            "--ramp-up", help="Closed loop: spread user starts over S (default duration/10)."
        ),
    ] = None,
    burst_cycle: Annotated[
        bool,
        typer.Option(
            "--burst-cycle",
            help="The seed's script: --burst-size at once, wait for all, idle --idle s, repeat.",
        ),
    ] = False,
    scenario: Annotated[
        str | None,
        typer.Option(
            "--scenario",
            help="steady-vs-burst: --concurrency users (32), or Poisson at --pattern's --rate, "
            "then the seed's bursts at the rate the steady leg measured (as bench).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="--scenario: directory for both legs.")
    ] = None,
    faults: Annotated[
        Path | None,
        typer.Option(
            "--faults",
            help="Kill or stall replicas on a schedule (YAML or JSON list of {replica: R, at: "
            "T, kind: kill|stall|wedge, restart_after: D}, engine seconds); needs --gateway or "
            "--autoscaler.",
        ),
    ] = None,
) -> None:
    """Simulate one engine (or, with --gateway or --autoscaler, replicas behind the
    gateway's router) on a workload; prints latency percentiles (engine time).

    The load is one of --trace, --pattern (open loop), --concurrency N (closed loop),
    --burst-cycle (the seed's closed burst cycle), or --scenario steady-vs-burst (both of
    the seed's legs and compare's verdict, as `bench --scenario` on a live server)."""
    if scenario is not None:
        if scenario != "steady-vs-burst" or out is None:
            raise UserError("--scenario steady-vs-burst needs --out DIR")
        if trace is not None or burst_cycle or gateway is not None:
            raise UserError("--scenario makes its own legs: no --trace/--burst-cycle/--gateway")
        setup = _Setup(profile, engine_config, _slo(slo), None, None)
        rate = pattern_spec.rate if pattern_spec is not None else None
        return _scenario(setup, out, shape_spec, rate, concurrency, think_time, ramp_up)
    closed = concurrency is not None or burst_cycle
    _check_load(trace, pattern_spec, concurrency, burst_cycle, think_time, ramp_up)
    if closed and gateway is not None:
        raise UserError("--gateway runs open-loop loads only (--trace or --pattern)")
    if closed and hop_latency_s:
        raise UserError("--hop-latency-s applies to open-loop loads only (--trace or --pattern)")
    setup = _Setup(profile, engine_config, _slo(slo), json_out, records_out)
    scaling, replicas = _scaling(autoscaler, min_replicas, max_replicas, cold_start_s, replicas,
                                 closed)  # fmt: skip
    if epp and gateway is None:
        raise UserError("--epp: needs --gateway CONFIG (the picker's config)")
    client_retry = _client_retry(retry, max_retries, retry_budget)
    if replicas > 1 and gateway is None and scaling is None:
        raise UserError("--replicas: needs --gateway CONFIG (the router that spreads them)")
    fleet = not closed and (gateway is not None or scaling is not None)
    if client_retry is not None and not fleet:
        raise UserError("--retry: needs --gateway or --autoscaler (what answers the errors), "
                        "and an open-loop load")  # fmt: skip
    schedule = () if faults is None else _faults(faults, replicas, fleet)
    if closed:
        result, extra = _closed(setup, shape_spec, concurrency, think_time, ramp_up, burst_cycle)
        return _report(setup, result, shape_spec.duration_s, extra)
    gateway_config = _gateway_config(gateway, scaling)  # before the workload: fails fast
    workload = _open_workload(trace, trace_format, pattern_spec)
    if gateway_config is not None:
        source = str(gateway) if gateway else "default (fleet)"
        result, extra = _fleet(setup, workload, gateway_config, source, replicas, scaling,
                               autoscaler, schedule, epp, client_retry)  # fmt: skip
    else:
        from burstguard.sim.loop import simulate

        result = simulate(workload, engine_config, profile, progress=_progress_of(workload))
        extra = {}
    from burstguard.sim.loop import add_hop_latency

    add_hop_latency(result.records, hop_latency_s)
    last = float(workload.arrival_s[-1])
    duration = pattern_spec.duration_s if pattern_spec is not None else last
    _report(setup, result, duration, extra)


@dataclass(frozen=True)
class _Setup:
    """What every mode shares: the engine, the SLO and where the results go."""

    profile: Profile
    engine: EngineConfig
    slo: Slo
    json_out: Path | None
    records_out: Path | None

    def __post_init__(self) -> None:
        for flag, path in (("--json", self.json_out), ("--records", self.records_out)):
            if path is not None:
                check_writable(path, flag)

    def summary(self, result: SimResult, duration: float, extra: dict[str, Any]) -> dict[str, Any]:
        """The run's summary (bench's format, `source: sim`)."""
        from burstguard.wire.summary import prefix_cache_block, summarize

        return summarize(
            result.records, duration_s=duration, slo=self.slo, source="sim",
            extra={"preemptions": result.preemptions, "steps": result.steps,
                   "profile": self.profile.name, "engine": asdict(self.engine),
                   "server_series": result.series,
                   "prefix_cache": prefix_cache_block(*result.prefix_cache), **extra},
        )  # fmt: skip


def _client_retry(mode: str, max_retries: int, budget: float | None) -> ClientRetry | None:
    """bench's retry options as the simulated clients' (None: they do not retry)."""
    from burstguard.client.retry import RETRY_MODES, RetryPolicy
    from burstguard.sim.client_retries import ClientRetry

    known = next((m for m in RETRY_MODES if m == mode), None)
    if known is None:
        raise UserError(f"--retry {mode!r}: use one of {', '.join(RETRY_MODES)}")
    if known == "none":
        return None
    return ClientRetry(RetryPolicy(mode=known, max_retries=max_retries), budget)


def _slo(text: str) -> Slo:
    from burstguard.wire.summary import Slo

    try:
        return Slo.parse(text)
    except ValueError as exc:
        raise UserError(f"--slo: {exc}") from None


def _check_load(
    trace: Path | None,
    pattern_spec: PatternSpec | None,
    concurrency: int | None,
    burst_cycle: bool,
    think_time: float,
    ramp_up: float | None,
) -> None:
    """Exactly one load, with sane closed-loop figures."""
    chosen = (trace is not None) + (pattern_spec is not None) + (concurrency is not None)
    if chosen + burst_cycle != 1:
        raise UserError(
            "give exactly one of --trace FILE, --pattern NAME, --concurrency N, --burst-cycle"
        )
    if concurrency is not None and concurrency < 1:
        raise UserError("--concurrency must be >= 1")
    if think_time < 0 or (ramp_up or 0.0) < 0:
        raise UserError("--think-time and --ramp-up must be >= 0")


def _scaling(
    autoscaler: str | None,
    min_replicas: int | None,
    max_replicas: int | None,
    cold_start_s: float | None,
    replicas: int,
    closed: bool,
) -> tuple[ScalingPolicy | None, int]:
    """The autoscaler's policy (None without --autoscaler) and the replicas to start with."""
    if autoscaler is None:
        if (min_replicas, max_replicas, cold_start_s) != (None,) * 3:
            raise UserError("--min-replicas, --max-replicas, --cold-start-s need --autoscaler")
        return None, replicas or 1
    from burstguard.core.scaling import load_policy

    if closed:
        raise UserError("--autoscaler runs open-loop loads only (--trace or --pattern)")
    scaling = load_policy(autoscaler).with_overrides(
        min_replicas=min_replicas, max_replicas=max_replicas, cold_start_s=cold_start_s
    )
    replicas = replicas or scaling.min_replicas
    if not scaling.min_replicas <= replicas <= scaling.max_replicas:
        raise UserError(
            f"--replicas {replicas}: outside the policy's {scaling.min_replicas}.."
            f"{scaling.max_replicas} (--min-replicas / --max-replicas)"
        )
    if replicas < 1:
        raise UserError("--replicas: the simulation starts with at least one replica")
    if replicas > MAX_REPLICAS:
        raise UserError(
            f"--min-replicas {replicas}: the simulation starts at most {MAX_REPLICAS} replicas"
        )
    return scaling, replicas


def _open_workload(
    trace: Path | None, trace_format: str | None, pattern_spec: PatternSpec | None
) -> Workload:
    from burstguard.workload.synth import synthesize
    from burstguard.workload.traces import load_workload

    if trace is not None:
        workload = load_workload(trace, trace_format)
    else:
        assert pattern_spec is not None
        workload = synthesize(pattern_spec)
    if len(workload) == 0:
        raise UserError("the workload has no requests")
    return workload


def _progress_of(workload: Workload) -> Callable[[float], None]:
    return sim_progress(float(workload.arrival_s[-1]), len(workload))


def _faults(path: Path, replicas: int, fleet: bool) -> tuple[Fault, ...]:
    """The --faults schedule, checked against the replicas the run starts with."""
    from burstguard.sim.faults import FaultFileError, check_replicas, load_faults

    if not fleet:
        raise UserError("--faults needs a fleet: --gateway CONFIG or --autoscaler, open loop")
    try:
        schedule = load_faults(path)
        check_replicas(schedule, replicas, str(path))
    except FaultFileError as exc:
        raise UserError(f"--faults: {exc}") from None
    return schedule


def _gateway_config(gateway: Path | None, scaling: ScalingPolicy | None) -> GatewayConfig | None:
    """The gateway in front of the replicas: --gateway's, the default one in front of an
    autoscaled fleet, or none (one engine, straight)."""
    if gateway is not None:
        from burstguard.core.gateway.config import GatewayConfig

        return GatewayConfig.load(gateway)
    return None if scaling is None else fleet_gateway(scaling.max_replicas)


def _fleet(
    setup: _Setup,
    workload: Workload,
    config: GatewayConfig,
    source: str,
    replicas: int,
    scaling: ScalingPolicy | None,
    autoscaler: str | None,
    faults: tuple[Fault, ...],
    epp: bool = False,
    retry: ClientRetry | None = None,
) -> tuple[SimResult, dict[str, Any]]:
    """Open loop through the gateway core into `replicas` replicas (or an autoscaled fleet),
    with `faults` on their schedule."""
    from burstguard.sim.gateway_loop import gateway_summary, simulate_gateway

    res = simulate_gateway(workload, setup.engine, setup.profile, config, replicas,
                           scaling=scaling, progress=_progress_of(workload),
                           faults=faults, epp=epp, retry=retry)  # fmt: skip
    block = gateway_summary(res, config, source=source)
    block["routed"] = res.routed
    extra: dict[str, Any] = {"gateway": block}
    if res.scaling is not None:
        assert scaling is not None
        extra.update(res.scaling)
        extra["autoscaler"] = {"policy": autoscaler, "kind": scaling.kind}
    else:
        extra["replica_seconds"] = replicas * res.end_s
    if faults:
        extra["faults"] = {
            "schedule": [{"replica": f.replica, "at": f.at_s, "kind": str(f.kind),
                          "restart_after": f.restart_after_s} for f in faults],
            "failovers": res.failovers,
        }  # fmt: skip
    return res, extra


def _report(setup: _Setup, result: SimResult, duration: float, extra: dict[str, Any]) -> None:
    """Writes the summary and records where asked and prints the run's figures."""
    from burstguard.wire.records import write_records
    from burstguard.wire.summary import write_summary

    summary = setup.summary(result, duration, extra)
    if setup.json_out:
        write_summary(setup.json_out, summary)
    if setup.records_out:
        write_records(setup.records_out, result.records)
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
    cache = summary["prefix_cache"]
    if setup.engine.enable_prefix_caching and cache["hit_rate"] is not None:
        print(
            f"prefix cache: {cache['hit_tokens']:,} of {cache['queried_tokens']:,} prompt "
            f"tokens hit ({cache['hit_rate']:.1%})"
        )
    if "scale_events" in summary:
        print(scaling_line(summary))
    if "faults" in summary:
        outcomes = summary["faults"]["failovers"] or {}
        answers = ", ".join(f"{k} {n}" for k, n in outcomes.items()) or "none"
        print(f"faults: {len(summary['faults']['schedule'])}; the fleet's answers to backend "
              f"failures: {answers}")  # fmt: skip
    if "gateway" in summary:
        print(class_table(summary))
        routed = summary["gateway"]["routed"] or {}
        if len(routed) > 1:
            print("routed: " + routed_line(routed))


ROUTED_SHOWN = 8  # an autoscaled fleet names every replica it ever started


def routed_line(routed: dict[str, int]) -> str:
    """Requests per replica in fleet order; past `ROUTED_SHOWN`, the busiest named and the
    rest summed."""
    total = sum(routed.values()) or 1
    ranked = list(routed.items())
    if len(ranked) > ROUTED_SHOWN:
        ranked.sort(key=lambda kv: -kv[1])
    shown = [f"{u} {n} ({n / total:.1%})" for u, n in ranked[:ROUTED_SHOWN]]
    rest = ranked[ROUTED_SHOWN:]
    if rest:
        n = sum(c for _, c in rest)
        shown.append(f"{len(rest)} more replicas {n} ({n / total:.1%})")
    return ", ".join(shown)


def _scenario(
    setup: _Setup,
    out: Path,
    shape_spec: PatternSpec,
    rate: float | None,
    users: int | None,
    think_time: float,
    ramp_up: float | None,
) -> None:
    """The steady and burst legs of `workload.scenario` (the rule bench follows too) in
    virtual time, written as bench writes them, and compare's verdict."""
    import json

    from burstguard.report.cli import exit_on
    from burstguard.report.compare import compare
    from burstguard.report.table import print_verdict
    from burstguard.sim.loop import simulate
    from burstguard.wire.records import write_records
    from burstguard.wire.summary import write_summary
    from burstguard.workload.scenario import burst_leg, matched_rate, steady_leg

    leg = steady_leg(shape_spec, rate, users)
    if leg.users is None:
        steady_result = simulate(leg.workload, setup.engine, setup.profile)
        extra: dict[str, Any] = {"mode": "open"}
    else:
        steady_result, extra = _users(setup, leg.workload, leg.users, leg.duration_s,
                                      think_time, ramp_up)  # fmt: skip
    steady = setup.summary(steady_result, leg.duration_s, extra)
    matched = matched_rate(steady)
    burst_result = simulate(burst_leg(shape_spec, matched), setup.engine, setup.profile)
    burst = setup.summary(burst_result, shape_spec.duration_s, {"mode": "open"})
    for name, summary, result in (("steady", steady, steady_result),
                                  ("burst", burst, burst_result)):  # fmt: skip
        write_summary(out / name / "summary.json", summary)
        write_records(out / name / "records.jsonl", result.records)
    verdict = compare(steady, burst, legs={"steady": "steady", "burst": "burst"})
    (out / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
    steady_name = f"{leg.users} users" if leg.users else f"Poisson at {rate:g} req/s"
    print_verdict(verdict, title=f"sim: {steady_name} vs seed bursts at {matched:.2f} req/s")
    print(f"legs in {out}/steady and {out}/burst, verdict in {out}/verdict.json")
    exit_on(verdict)


def _closed(
    setup: _Setup,
    shape_spec: PatternSpec,
    concurrency: int | None,
    think_time: float,
    ramp_up: float | None,
    burst_cycle: bool,
) -> tuple[SimResult, dict[str, Any]]:
    """A closed-loop run (users or the burst cycle) and its summary keys."""
    from burstguard.sim.closed import Cycle, simulate_closed
    from burstguard.workload.cycle import BurstCycle, CycleSpec
    from burstguard.workload.synth import shape_pool

    shapes = shape_pool(shape_spec)
    duration = shape_spec.duration_s
    if burst_cycle:
        if shape_spec.rate is not None:
            raise UserError("--rate does not apply to --burst-cycle (set --burst-size, --idle)")
        try:
            spec = CycleSpec(shape_spec.burst_size, shape_spec.idle_s, duration, shape_spec.seed)
        except ValueError as exc:
            raise UserError(f"--burst-cycle: {exc}") from None
        cycle = BurstCycle(spec)
        result = simulate_closed(Cycle(shapes, cycle), setup.engine, setup.profile)
        return result, {"mode": "cycle", "cycle": cycle.log}
    assert concurrency is not None
    return _users(setup, shapes, concurrency, duration, think_time, ramp_up)


def _users(
    setup: _Setup,
    shapes: Workload,
    users: int,
    duration: float,
    think_time: float,
    ramp_up: float | None,
) -> tuple[SimResult, dict[str, Any]]:
    """`users` closed-loop users over `shapes` for `duration` (starts spread over the
    ramp-up, default a tenth of it, at most 10 s, as bench does)."""
    from burstguard.sim.closed import Users, simulate_closed

    ramp = min(10.0, duration / 10) if ramp_up is None else ramp_up
    client = Users(shapes, users, duration, think_time, ramp)
    result = simulate_closed(client, setup.engine, setup.profile)
    return result, {"mode": "closed", "concurrency": users}


PROGRESS_WALL_S = 2.0  # a line on stderr this often, once a run has lasted this long


def sim_progress(last_arrival_s: float, requests: int) -> Callable[[float], None]:
    """A status line on stderr every PROGRESS_WALL_S of wall time (a short run prints
    none): how far the virtual clock is, against the last arrival."""
    started = last = time.monotonic()

    def report(now_s: float) -> None:
        nonlocal last
        wall = time.monotonic()
        if wall - last >= PROGRESS_WALL_S:
            last = wall
            print(f"sim: {requests:,} requests, virtual time {now_s:,.0f} s of "
                  f"~{last_arrival_s:,.0f} s, {wall - started:.0f} s so far",
                  file=sys.stderr, flush=True)  # fmt: skip

    return report


def scaling_line(summary: dict[str, Any]) -> str:
    """One line on what the fleet cost and did."""
    reps = summary["replicas"]
    return (
        f"replica-seconds {summary['replica_seconds']:.0f}, scale events "
        f"{len(summary['scale_events'])}, ready replicas max {max(reps['ready'], default=0)}, "
        f"desired max {max(reps['desired'], default=0)}"
    )


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
