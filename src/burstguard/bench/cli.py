"""CLI: `burstguard bench` — bursty or steady load against any OpenAI-compatible server."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.errors import UserError
from burstguard.workload.options import pattern_options
from burstguard.workload.scenario import SCENARIOS
from burstguard.workload.synth import PatternSpec

if TYPE_CHECKING:
    from burstguard.report.compare import Verdict

_LOAD, _CLIENT, _OUT, _SWEEP = "Load", "Client behaviour", "Output", "Sweep"


def _opt(*decls: str, help: str, panel: str = _LOAD, **kw: Any) -> Any:
    return typer.Option(*decls, help=help, rich_help_panel=panel, **kw)


@pattern_options()
def bench(
    pattern_spec: PatternSpec | None,
    shape_spec: PatternSpec,
    target: Annotated[str, _opt("--target", help="Server base URL, e.g. http://host:8000")],
    out: Annotated[Path, _opt("--out", help="Run directory to write", panel=_OUT)],
    model: Annotated[
        str | None, _opt("--model", help="Model name (default: the only one served)")
    ] = None,
    workload_file: Annotated[
        Path | None, _opt("--workload", help="Replay a trace (any analyze format)")
    ] = None,
    trace_format: Annotated[str | None, _opt("--format", help="Trace format")] = None,
    window: Annotated[str | None, _opt("--window", help="Trace: only START-END seconds")] = None,
    speed: Annotated[float, _opt("--speed", help="Trace: replay at K x its rate")] = 1.0,
    prompt_scale: Annotated[
        float, _opt("--prompt-scale", help="Trace: multiply prompt lengths by F")
    ] = 1.0,
    output_scale: Annotated[
        float, _opt("--output-scale", help="Trace: multiply output lengths by F")
    ] = 1.0,
    concurrency: Annotated[
        int | None, _opt("--concurrency", help="Closed loop: N users (seed baseline 32)")
    ] = None,
    burst_cycle: Annotated[
        bool,
        _opt(
            "--burst-cycle",
            help="Closed loop, the seed's script: --burst-size at once, wait for all, "
            "idle --idle s, repeat",
        ),
    ] = False,
    think_time: Annotated[
        float, _opt("--think-time", help="Closed loop: seconds between a user's requests")
    ] = 0.0,
    ramp_up: Annotated[
        float | None,
        _opt("--ramp-up", help="Closed loop: spread user starts over S (default duration/10)"),
    ] = None,
    scenario: Annotated[
        str | None, _opt("--scenario", help="steady-vs-burst: run both legs and compare")
    ] = None,
    api: Annotated[str, _opt("--api", help="chat or completions")] = "chat",
    stream: Annotated[bool, _opt("--stream/--no-stream", help="SSE streaming")] = True,
    ignore_eos: Annotated[
        bool, _opt("--ignore-eos/--no-ignore-eos", help="Outputs follow the workload")
    ] = True,
    send_priority: Annotated[
        bool, _opt("--send-priority", help="Send vLLM's `priority` field from the class")
    ] = False,
    prompt_file: Annotated[
        Path | None, _opt("--prompt-file", help="Prompts: text lines or JSONL `prompt`")
    ] = None,
    tokenizer: Annotated[
        str,
        _opt(
            "--tokenizer",
            help="Size prompt blocks in the served model's tokens: auto (its own tokenizer "
            "if installed), estimate, or a tokenizer.json",
        ),
    ] = "auto",
    speedup: Annotated[
        float, _opt("--speedup", help="Target runs X times real time (emulator --speedup)")
    ] = 1.0,
    timeout: Annotated[float, _opt("--timeout", help="Seconds per try", panel=_CLIENT)] = 600.0,
    retry: Annotated[
        str, _opt("--retry", help="none, immediate or exponential", panel=_CLIENT)
    ] = "none",
    max_retries: Annotated[int, _opt("--max-retries", help="Retries", panel=_CLIENT)] = 3,
    retry_base: Annotated[
        float, _opt("--retry-base", help="Backoff base seconds", panel=_CLIENT)
    ] = 0.5,
    retry_cap: Annotated[
        float, _opt("--retry-cap", help="Backoff cap seconds", panel=_CLIENT)
    ] = 8.0,
    honor_retry_after: Annotated[
        bool,
        _opt(
            "--honor-retry-after/--ignore-retry-after",
            help="Wait as told by 429",
            panel=_CLIENT,
        ),
    ] = True,
    retry_budget: Annotated[
        float | None,
        _opt("--retry-budget", help="Max retries per request, e.g. 0.2", panel=_CLIENT),
    ] = None,
    scrape_metrics: Annotated[
        bool | None,
        _opt(
            "--scrape-metrics/--no-scrape-metrics",
            help="Poll the target's /metrics each second (--scenario: on when it has one)",
            panel=_OUT,
        ),
    ] = None,
    metrics_url: Annotated[
        str | None, _opt("--metrics-url", help="Scrape this /metrics URL instead", panel=_OUT)
    ] = None,
    api_key: Annotated[
        str | None,
        _opt(
            "--api-key",
            envvar="BURSTGUARD_API_KEY",
            show_envvar=False,
            help="Sent as 'Authorization: Bearer' with every request: a gateway's api_keys, "
            "vLLM's --api-key; env var BURSTGUARD_API_KEY",
        ),
    ] = None,
    metrics_key: Annotated[
        str | None,
        _opt(
            "--metrics-key",
            envvar="BURSTGUARD_METRICS_KEY",
            show_envvar=False,
            help="Bearer key of the /metrics scrape (the gateway's metrics.api_key); env "
            "var BURSTGUARD_METRICS_KEY",
            panel=_OUT,
        ),
    ] = None,
    slo: Annotated[str, _opt("--slo", help="SLO seconds", panel=_OUT)] = ("ttft=0.5,tpot=0.05"),
    report: Annotated[
        Path | None, _opt("--report", help="Write an HTML report here", panel=_OUT)
    ] = None,
    force: Annotated[
        bool, _opt("--force", help="Overwrite a run already in --out", panel=_OUT)
    ] = False,
    quiet: Annotated[bool, _opt("--quiet", help="No progress line", panel=_OUT)] = False,
    workers: Annotated[
        int, _opt("--workers", help="Processes sending the one schedule", panel=_CLIENT)
    ] = 1,
    start_at: Annotated[
        float | None,
        _opt(
            "--start-at",
            help="Unix time of the schedule's zero (line up with `burstguard fleet "
            "--start-at`); default: at once",
            panel=_CLIENT,
        ),
    ] = None,
    shard: Annotated[
        str | None,
        _opt(
            "--shard",
            help="K/N: send shard K (0-based) of N of the one schedule, from N machines "
            "with one --start-at; report and compare merge a directory of shard runs",
            panel=_CLIENT,
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        _opt(
            "--sweep",
            help="rate=A,B,... (open loop: --pattern, default poisson) or "
            "concurrency=N,M,... (closed loop); START:STOP:STEP for a range. One leg of "
            "--duration per load in OUT/NN-AXIS-LOAD/, the knee in OUT/sweep.json",
            panel=_SWEEP,
        ),
    ] = None,
    warmup: Annotated[
        float | None,
        _opt(
            "--warmup",
            help="Seconds at each load's start left out of its figures (default: "
            "duration/10; closed loop: at least --ramp-up)",
            panel=_SWEEP,
        ),
    ] = None,
    cooldown: Annotated[
        float | None,
        _opt(
            "--cooldown",
            help="Seconds at each load's end left out (default: duration/10)",
            panel=_SWEEP,
        ),
    ] = None,
    stop_below_slo: Annotated[
        float,
        _opt(
            "--stop-below-slo",
            help="Stop after a load whose SLO attainment is below this share",
            panel=_SWEEP,
        ),
    ] = 0.9,
    stop_above_errors: Annotated[
        float,
        _opt(
            "--stop-above-errors",
            help="Stop after a load whose share of errors is above this",
            panel=_SWEEP,
        ),
    ] = 0.05,
    steady_from_sweep: Annotated[
        Path | None,
        _opt(
            "--steady-from-sweep",
            help="--scenario: the steady leg at this sweep's knee (a --sweep --out "
            "directory): Poisson at its rate, or its users",
            panel=_SWEEP,
        ),
    ] = None,
) -> None:
    """Send bursty or steady load and measure TTFT/TPOT/ITL/E2E per request.

    Exactly one of --pattern, --workload or --concurrency picks the load, except with
    --scenario steady-vs-burst (steady: --concurrency users, default 32, or Poisson at
    --rate; burst: the seed's pattern at the steady leg's measured rate).
    """
    from burstguard.bench.runner import BenchConfig
    from burstguard.client.retry import RETRY_MODES, RetryPolicy
    from burstguard.clock import check_start_at
    from burstguard.http.preflight import check_target
    from burstguard.wire.summary import Slo

    if api not in ("chat", "completions"):
        raise UserError(f"--api {api!r}: use chat or completions")
    if retry not in RETRY_MODES:
        raise UserError(f"--retry {retry!r}: use one of {', '.join(RETRY_MODES)}")
    if speedup <= 0 or timeout <= 0:
        raise UserError("--speedup and --timeout must be > 0")
    if concurrency is not None and concurrency < 1:
        raise UserError("--concurrency must be >= 1")
    if not 1 <= workers <= 64:
        raise UserError(f"--workers must be 1-64 (got {workers})")
    if workers > 1 and burst_cycle:
        raise UserError("--burst-cycle runs in one process (each burst waits for the whole "
                        "previous one): drop --workers")  # fmt: skip
    check_start_at(start_at)
    machine_shard = parse_shard(shard)
    if machine_shard[1] > 1 and (start_at is None or burst_cycle or scenario is not None):
        raise UserError(
            "--shard: the N machines need one time zero (--start-at T), and it splits one "
            "open or closed loop (not --burst-cycle or --scenario)"
        )
    if (ramp_up or 0.0) < 0 or think_time < 0:
        raise UserError("--ramp-up and --think-time must be >= 0")
    chosen = sum(x is not None for x in (pattern_spec, workload_file, concurrency))
    chosen += burst_cycle
    if steady_from_sweep is not None and (
        scenario is None or chosen or shape_spec.rate is not None
    ):
        raise UserError("--steady-from-sweep sets --scenario's steady leg: give --scenario "
                        "and no --pattern, --rate or --concurrency")  # fmt: skip
    sweep_plan = None
    if sweep is not None:
        from burstguard.report.sweep import plan_sweep

        try:
            sweep_plan = plan_sweep(
                sweep, duration_s=shape_spec.duration_s, rate_given=shape_spec.rate is not None,
                pattern=None if pattern_spec is None else pattern_spec.pattern,
                warmup_s=warmup, cooldown_s=cooldown,
                ramp_up_s=min(10.0, shape_spec.duration_s / 10) if ramp_up is None else ramp_up,
                rule=(stop_below_slo, stop_above_errors),
                conflicts={"--workload": workload_file is not None, "--scenario": bool(scenario),
                           "--concurrency": concurrency is not None, "--burst-cycle": burst_cycle,
                           "--shard": machine_shard[1] > 1},
            )  # fmt: skip
        except ValueError as exc:
            raise UserError(str(exc)) from None
    elif scenario is None and chosen != 1:
        raise UserError(
            "give exactly one of --pattern NAME, --workload FILE, --concurrency N, --burst-cycle"
        )
    if scenario is not None and burst_cycle:
        raise UserError("--burst-cycle is a load of its own: not with --scenario")
    if scenario is not None and scenario not in SCENARIOS:
        raise UserError(f"--scenario {scenario!r}: use one of {', '.join(SCENARIOS)}")
    try:
        slo_target = Slo.parse(slo)
        policy = RetryPolicy(
            mode=retry, max_retries=max_retries, base_s=retry_base,
            cap_s=retry_cap, honor_retry_after=honor_retry_after,
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _check_out(out, force)
    base, served = check_target(target, model, api_key)
    if scrape_metrics is None:
        from burstguard.http.preflight import serves_metrics

        scrape_metrics = scenario is not None and metrics_url is None
        scrape_metrics = scrape_metrics and serves_metrics(base, api_key=metrics_key)
    prompts = None
    if prompt_file is not None:
        from burstguard.bench.payload import load_prompt_file

        prompts = load_prompt_file(prompt_file)
    from burstguard.tokenizer import exact_pieces, prompt_counter

    pieces = None if prompts is not None else exact_pieces(prompt_counter(tokenizer, served))
    config = BenchConfig(
        target=base, model=served, out_dir=out, api=api,  # type: ignore[arg-type]
        stream=stream, ignore_eos=ignore_eos, send_priority=send_priority, prompts=prompts,
        timeout_s=timeout, retry=policy, retry_budget=retry_budget, concurrency=concurrency,
        think_time_s=think_time, speedup=speedup,
        ramp_up_s=min(10.0, shape_spec.duration_s / 10) if ramp_up is None else ramp_up,
        duration_s=None if workload_file else shape_spec.duration_s,  # a trace runs to its end
        scrape_url=metrics_url or (f"{base}/metrics" if scrape_metrics else None),
        api_key=api_key, metrics_key=metrics_key,
        slo=slo_target, seed=shape_spec.seed, cycle=_cycle(shape_spec) if burst_cycle else None,
        workers=workers, start_at=start_at, shard=machine_shard, prompt_pieces=pieces,
    )  # fmt: skip
    if sweep_plan is not None:
        _sweep(config, sweep_plan, shape_spec, report, quiet)
        return
    if steady_from_sweep is not None:
        from burstguard.bench.sweep_run import steady_from_sweep as knee_point

        try:
            pattern_spec, config = knee_point(steady_from_sweep, shape_spec, config)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    if scenario == "steady-vs-burst":
        from burstguard.report.cli import exit_on

        exit_on(_steady_vs_burst(config, shape_spec, pattern_spec, report, quiet))
        return
    summary = _one_leg(
        config,
        _workload(
            pattern_spec,
            shape_spec,
            workload_file,
            trace_format,
            (window, speed, prompt_scale, output_scale),
        ),
        quiet,
    )
    if report is not None:
        from burstguard.report.cli import load_run
        from burstguard.report.html import write_run_report

        write_run_report(*load_run(out), report, title=f"burstguard bench: {base}")
        print(f"report written to {report}")
    _print_summary(summary, out)
    if summary["interrupted"]:
        print("interrupted: the summary covers the requests that were sent")
        raise typer.Exit(code=130)


def parse_shard(text: str | None) -> tuple[int, int]:
    """`K/N` -> (K, N), 0 <= K < N <= 1024; None -> (0, 1), the whole schedule."""
    if text is None:
        return 0, 1
    k, sep, n = text.partition("/")
    if not (sep and k.strip().isdigit() and n.strip().isdigit()):
        raise UserError(f"--shard {text!r}: expected K/N, e.g. 0/4")
    shard = int(k), int(n)
    if not 0 <= shard[0] < shard[1] <= 1024:
        raise UserError(f"--shard {text!r}: K must be 0..N-1 and N at most 1024")
    return shard


def _check_out(out: Path, force: bool) -> None:
    held = [p for p in (out / "records.jsonl", out / "summary.json") if p.exists()]
    held += [p for p in (out / "steady", out / "burst", out / "sweep.json") if p.exists()]
    if held and not force:
        raise UserError(f"{out} already holds a run ({held[0].name}); use --force or a new --out")


def _workload(
    pattern_spec: PatternSpec | None,
    shape_spec: PatternSpec,
    workload_file: Path | None = None,
    trace_format: str | None = None,
    trace_flags: tuple[str | None, float, float, float] = (None, 1.0, 1.0, 1.0),
) -> Any:
    """The workload to send; `trace_flags`: --window, --speed, --prompt-scale, --output-scale."""
    from burstguard.workload.synth import shape_pool, synthesize
    from burstguard.workload.traces import load_workload
    from burstguard.workload.transform import window_and_speed

    if workload_file is not None:
        workload = window_and_speed(load_workload(workload_file, trace_format), *trace_flags)
    elif pattern_spec is not None:
        workload = synthesize(pattern_spec)
    else:  # closed loop: a pool of request shapes, used in turn
        workload = shape_pool(shape_spec)
    if len(workload) == 0:
        raise UserError("the workload has no requests")
    return workload


def _sweep(
    config: Any, plan: Any, shape_spec: PatternSpec, report: Path | None, quiet: bool
) -> None:
    """`--sweep`: the points (bench.sweep_run), the table and knee, the HTML report."""
    from burstguard.bench.sweep_run import print_sweep, run_sweep

    spec, window, rule, pattern = plan
    doc = run_sweep(config, spec, shape_spec, window, rule, pattern=pattern, quiet=quiet)
    if report is not None:
        from burstguard.report.html import write_sweep_report

        write_sweep_report(doc, report, title=f"burstguard sweep: {config.target}")
        print(f"report written to {report}")
    print_sweep(doc, config.out_dir)
    if doc["interrupted"]:
        raise typer.Exit(code=130)


def _cycle(shape_spec: PatternSpec) -> Any:
    from burstguard.workload.cycle import CycleSpec

    if shape_spec.rate is not None:
        raise UserError(
            "--rate does not apply to --burst-cycle: its load waits for each burst to finish "
            "(set --burst-size and --idle instead)"
        )
    try:
        return CycleSpec(
            shape_spec.burst_size, shape_spec.idle_s, shape_spec.duration_s, shape_spec.seed
        )
    except ValueError as exc:
        raise UserError(f"--burst-cycle: {exc}") from None


def _one_leg(config: Any, workload: Any, quiet: bool) -> dict[str, Any]:
    from burstguard.bench.leg import run_bench
    from burstguard.bench.progress import make_reporter

    return run_bench(config, workload, make_reporter(config.label, quiet))


def _steady_vs_burst(
    config: Any,
    shape_spec: PatternSpec,
    pattern_spec: PatternSpec | None,
    report: Path | None,
    quiet: bool,
) -> Verdict:
    """Steady leg, then the burst leg at the steady leg's measured request rate."""
    from burstguard.report.cli import run_compare
    from burstguard.report.compare import Thresholds
    from burstguard.report.table import print_verdict
    from burstguard.workload.scenario import burst_leg, matched_rate, steady_leg

    out = config.out_dir
    rate = pattern_spec.rate if pattern_spec is not None else None
    leg = steady_leg(shape_spec, rate, config.concurrency)
    steady_cfg = dataclasses.replace(config, out_dir=out / "steady", label="steady",
                                     concurrency=leg.users)  # fmt: skip
    steady = _one_leg(steady_cfg, leg.workload, quiet)
    if steady["interrupted"]:
        print(f"interrupted during the steady leg; its results are in {out / 'steady'}")
        raise typer.Exit(code=130)
    matched = matched_rate(steady)
    burst_cfg = dataclasses.replace(config, out_dir=out / "burst", label="burst", concurrency=None)
    _one_leg(burst_cfg, burst_leg(shape_spec, matched), quiet)
    verdict, legs = run_compare(out / "steady", out / "burst", Thresholds())
    title = f"steady vs seed bursts at {matched:.2f} req/s"
    print_verdict(verdict, title=title)
    (out / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
    if report is not None:
        from burstguard.report.html import write_compare_report

        write_compare_report(legs, verdict, report, title=f"burstguard: {title}")
        print(f"report written to {report}")
    return verdict


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    def ms(block: dict[str, Any], key: str) -> str:
        value = block.get(key)
        return "-" if value is None else f"{value * 1000:.1f} ms"

    t, tp, e, lag = (summary[k] for k in ("ttft_s", "tpot_s", "e2e_s", "schedule_lag_s"))
    slo = summary["slo_attainment"]
    print(
        f"{summary['requests']} requests, {summary['completed']} completed, "
        f"{summary['errors']} errors, {summary['retries']} retries\n"
        f"TTFT p50 {ms(t, 'p50')}  p95 {ms(t, 'p95')}  p99 {ms(t, 'p99')}\n"
        f"TPOT p50 {ms(tp, 'p50')}  p95 {ms(tp, 'p95')}   E2E p95 {ms(e, 'p95')}\n"
        f"schedule lag p50 {ms(lag, 'p50')}  p99 {ms(lag, 'p99')}\n"
        f"offered {summary['offered_rate_rps']:.2f} req/s, achieved "
        f"{summary['achieved_rate_rps']:.2f} req/s, {summary['output_tokens_per_s']:.0f} tok/s, "
        f"SLO attainment {'-' if slo is None else f'{slo:.1%}'}\n"
        f"results in {out}/ (records.jsonl, summary.json)"
    )


def register(app: typer.Typer) -> None:
    """Adds bench."""
    app.command()(bench)
