"""`burstguard compare` (the steady-vs-burst gate) and `burstguard report` (a run's HTML)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from burstguard.bench.compare import Thresholds, Verdict, compare
from burstguard.bench.records import RequestRecord, read_records
from burstguard.bench.summary import read_summary
from burstguard.errors import UserError


def summary_path(path: Path) -> Path:
    """A summary file, or a run directory holding `summary.json`."""
    return path / "summary.json" if path.is_dir() else path


def load_run(path: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    """A run's summary and, when `records.jsonl` lies beside it, its records (else none:
    reports then draw from the summary's series alone)."""
    spath = summary_path(path)
    try:
        summary = read_summary(spath)
        rpath = spath.parent / "records.jsonl"
        records = list(read_records(rpath)) if rpath.is_file() else []
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return summary, records


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


def compare_cmd(
    steady: Annotated[Path, typer.Argument(help="steady leg: summary.json or its run dir")],
    burst: Annotated[Path, typer.Argument(help="burst leg: summary.json or its run dir")],
    max_ttft_p95_ratio: Annotated[
        float, typer.Option(help="pass while burst P95 TTFT <= this x steady")
    ] = 2.0,
    serious_ttft_p95_ratio: Annotated[
        float, typer.Option(help="call it serious from this ratio up")
    ] = 5.0,
    max_tpot_p95_ratio: Annotated[float, typer.Option(help="TPOT stability limit")] = 1.5,
    max_itl_p95_ratio: Annotated[float, typer.Option(help="ITL stability limit")] = 1.5,
    min_slo: Annotated[float, typer.Option(help="minimum SLO attainment of each leg")] = 0.95,
    max_drain_s: Annotated[
        float | None, typer.Option(help="queue must drain within this after a burst peak")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the verdict as JSON")] = False,
    report: Annotated[
        Path | None, typer.Option(help="write the side-by-side HTML report here")
    ] = None,
) -> None:
    """Steady vs burst, the seed's validation: exit 0 within limits, 1 outside, 2 bad input."""
    try:
        thresholds = Thresholds(
            max_ttft_p95_ratio=max_ttft_p95_ratio,
            serious_ttft_p95_ratio=serious_ttft_p95_ratio,
            max_tpot_p95_ratio=max_tpot_p95_ratio,
            max_itl_p95_ratio=max_itl_p95_ratio,
            min_slo=min_slo,
            max_drain_s=max_drain_s,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    verdict, legs = run_compare(steady, burst, thresholds)
    if report is not None:
        from burstguard.report.html import write_compare_report

        write_compare_report(legs, verdict, report)
    if json_out:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        from burstguard.report.table import print_verdict

        print_verdict(verdict)
        if report is not None:
            print(f"report written to {report}")
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
