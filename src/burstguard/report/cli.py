"""`burstguard compare` (the steady-vs-burst gate) and `burstguard report` (a run's HTML)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from burstguard.bench.compare import (
    Thresholds,
    Tolerances,
    Verdict,
    compare,
    compare_baseline,
)
from burstguard.bench.records import RequestRecord, read_records
from burstguard.bench.summary import merge_shards, read_summary
from burstguard.errors import UserError


def summary_path(path: Path) -> Path:
    """A summary file, or a run directory holding `summary.json`."""
    return path / "summary.json" if path.is_dir() else path


def load_run(path: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    """A run's summary and, when `records.jsonl` lies beside it, its records (else none:
    reports then draw from the summary's series alone). A directory of `bench --shard`
    runs (one per subdirectory) is merged into the one run they sent together."""
    try:
        shards = shard_runs(path)
        if shards:
            return merge_shards([_read_run(p) for p in shards])
        return _read_run(summary_path(path))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _read_run(spath: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    summary = read_summary(spath)
    rpath = spath.parent / "records.jsonl"
    return summary, list(read_records(rpath)) if rpath.is_file() else []


def shard_runs(path: Path) -> list[Path]:
    """The summaries of the shard runs in directory `path` (none for a plain run)."""
    if not path.is_dir() or (path / "summary.json").is_file():
        return []
    found = []
    for spath in sorted(path.glob("*/summary.json")):
        shard = read_summary(spath).get("shard")
        if isinstance(shard, list) and len(shard) == 2 and shard[1] > 1:
            found.append(spath)
    return found


def leg_label(path: Path) -> str:
    spath = summary_path(path)
    return spath.parent.name if spath.name == "summary.json" else spath.stem


def run_compare(
    steady_path: Path, burst_path: Path, thresholds: Thresholds
) -> tuple[Verdict, list[tuple[str, dict[str, Any], list[RequestRecord]]]]:
    steady, steady_records = load_run(steady_path)
    burst, burst_records = load_run(burst_path)
    names = (leg_label(steady_path), leg_label(burst_path))
    if names[0] == names[1]:
        names = (f"steady ({names[0]})", f"burst ({names[1]})")
    verdict = compare(steady, burst, thresholds, legs={"steady": names[0], "burst": names[1]})
    legs = [(names[0], steady, steady_records), (names[1], burst, burst_records)]
    return verdict, legs


def burst_leg(path: Path) -> Path:
    """A run, or the burst leg of a `--scenario` directory."""
    return path / "burst" if (path / "burst" / "summary.json").is_file() else path


def run_baseline(
    old_path: Path, new_path: Path, tolerances: Tolerances
) -> tuple[Verdict, list[tuple[str, dict[str, Any], list[RequestRecord]]]]:
    old_path, new_path = burst_leg(old_path), burst_leg(new_path)
    old, old_records = load_run(old_path)
    new, new_records = load_run(new_path)
    names = {"steady": f"baseline ({leg_label(old_path)})", "burst": f"new ({leg_label(new_path)})"}
    verdict = compare_baseline(old, new, tolerances, legs=names)
    legs = [(names["steady"], old, old_records), (names["burst"], new, new_records)]
    return verdict, legs


def compare_cmd(
    steady: Annotated[
        Path, typer.Argument(help="steady leg (summary.json or run dir); with --baseline: NEW run")
    ],
    burst: Annotated[
        Path | None, typer.Argument(help="burst leg: summary.json or its run dir")
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="OLD run (or --scenario dir): gate NEW's burst leg against it"),
    ] = None,
    max_ttft_p95_ratio: Annotated[
        float, typer.Option(help="pass while burst P95 TTFT <= this x steady")
    ] = 2.0,
    serious_ttft_p95_ratio: Annotated[
        float, typer.Option(help="call it serious from this ratio up")
    ] = 5.0,
    max_tpot_p95_ratio: Annotated[float, typer.Option(help="TPOT stability limit")] = 1.5,
    max_itl_p95_ratio: Annotated[float, typer.Option(help="ITL stability limit")] = 1.5,
    max_itl_jitter_ratio: Annotated[
        float, typer.Option(help="burst ITL p99/mean <= this x steady's")
    ] = 2.0,
    min_slo: Annotated[float, typer.Option(help="minimum SLO attainment of each leg")] = 0.95,
    max_drain_s: Annotated[
        float | None, typer.Option(help="queue must drain within this after a burst peak")
    ] = None,
    max_retry_amplification: Annotated[
        float, typer.Option(help="burst attempts per request at most this")
    ] = 1.2,
    max_kv_peak: Annotated[
        float | None, typer.Option(help="burst KV cache usage at most this (0-1)")
    ] = None,
    max_preemptions: Annotated[
        int | None, typer.Option(help="burst preemptions at most this")
    ] = None,
    max_schedule_lag: Annotated[
        float, typer.Option(help="invalid run (exit 2) if p99 schedule lag exceeds this (s)")
    ] = 1.0,
    tolerance: Annotated[
        float, typer.Option(help="--baseline: P95 latencies/throughput may be this much worse")
    ] = 0.10,
    slo_tolerance: Annotated[
        float, typer.Option(help="--baseline: SLO attainment may drop this much")
    ] = 0.02,
    drain_tolerance: Annotated[
        float, typer.Option(help="--baseline: worst queue drain may grow this many s")
    ] = 1.0,
    preemption_tolerance: Annotated[
        float, typer.Option(help="--baseline: this many more preemptions allowed")
    ] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="print the verdict as JSON")] = False,
    report: Annotated[
        Path | None, typer.Option(help="write the side-by-side HTML report here")
    ] = None,
) -> None:
    """Steady vs burst, the seed's validation; or, with --baseline OLD NEW, a release's
    burst leg against the last one's. Exit 0 within limits, 1 outside, 2 bad input or an
    invalid run (the client, not the server, was the bottleneck)."""
    try:
        if baseline is not None:
            if burst is not None:
                raise UserError("with --baseline OLD give one run: NEW")
            tolerances = Tolerances(
                latency=tolerance, slo=slo_tolerance, drain_s=drain_tolerance,
                preemptions=preemption_tolerance, max_schedule_lag_s=max_schedule_lag,
            )  # fmt: skip
        else:
            if burst is None:
                raise UserError("give STEADY and BURST runs, or --baseline OLD and NEW")
            thresholds = Thresholds(
                max_ttft_p95_ratio=max_ttft_p95_ratio,
                serious_ttft_p95_ratio=serious_ttft_p95_ratio,
                max_tpot_p95_ratio=max_tpot_p95_ratio,
                max_itl_p95_ratio=max_itl_p95_ratio,
                min_slo=min_slo,
                max_drain_s=max_drain_s,
                max_itl_jitter_ratio=max_itl_jitter_ratio,
                max_retry_amplification=max_retry_amplification,
                max_kv_peak=max_kv_peak,
                max_preemptions=max_preemptions,
                max_schedule_lag_s=max_schedule_lag,
            )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if baseline is not None:
        verdict, legs = run_baseline(baseline, steady, tolerances)
    else:
        assert burst is not None
        verdict, legs = run_compare(steady, burst, thresholds)
    if report is not None:
        from burstguard.report.html import write_compare_report

        write_compare_report(legs, verdict, report)
    if json_out:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        from burstguard.report.table import print_verdict

        title = "baseline vs new (burst leg)" if baseline is not None else ""
        print_verdict(verdict, title=title)
        if report is not None:
            print(f"report written to {report}")
    exit_on(verdict)


def exit_on(verdict: Verdict) -> None:
    """Exit 2 for an invalid run (saying why), 1 for a failed gate, else return."""
    if not verdict.valid:
        for reason in verdict.invalid:
            print(f"error: invalid run: {reason}", file=sys.stderr)
        raise typer.Exit(code=2)
    if not verdict.passed:
        raise typer.Exit(code=1)


def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="run dirs or summary files, side by side")],
    out: Annotated[Path, typer.Option(help="the HTML file to write")] = Path("report.html"),
    title: Annotated[str, typer.Option(help="page title")] = "burstguard run",
) -> None:
    """Write a self-contained HTML report of one run, or several side by side."""
    from burstguard.report.html import write_compare_report, write_run_report

    loaded = [(leg_label(p), *load_run(p)) for p in runs]
    if len(loaded) == 1:
        write_run_report(loaded[0][1], loaded[0][2], out, title=title)
    else:
        write_compare_report(loaded, None, out, title=title)
    print(f"report written to {out}")


def register(app: typer.Typer) -> None:
    """Adds `compare` and `report` to the burstguard app."""
    app.command("compare")(compare_cmd)
    app.command("report")(report_cmd)
