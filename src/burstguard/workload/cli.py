"""CLI: `burstguard analyze` (how bursty is a trace) and `burstguard generate` (synthesise one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from burstguard.errors import UserError
from burstguard.workload.options import pattern_options
from burstguard.workload.synth import PatternSpec, synthesize


def analyze(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Trace file (Azure CSV, Mooncake JSONL, BurstGPT CSV, burstguard JSONL)."
        ),
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="Override format detection: azure, mooncake, burstgpt, burstguard."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a plot: FILE.png or FILE.html.")
    ] = None,
    window: Annotated[
        str | None, typer.Option("--window", help="Only requests in START-END seconds.")
    ] = None,
    speed: Annotated[float, typer.Option("--speed", help="Replay at K x the trace's rate.")] = 1.0,
) -> None:
    """Describe how bursty a trace is: peak-to-average, CV, Hurst, Gamma fit, token stats."""
    from burstguard.workload.metrics import analyze as analyze_workload
    from burstguard.workload.traces import load_workload

    if plot is not None and plot.suffix.lower() not in (".png", ".html"):
        raise UserError(f"--plot {plot}: use a .png or .html file name")
    from burstguard.workload.transform import window_and_speed

    workload = window_and_speed(load_workload(trace, fmt), window, speed)
    if len(workload) == 0:
        raise UserError(f"{trace}: no requests in the trace")
    result = analyze_workload(workload)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(trace, result)
    if plot is not None:
        from burstguard.workload.plot import plot_workload

        plot_workload(workload, result, plot)
        if not as_json:
            print(f"plot written to {plot}")


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _print_table(trace: Path, r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"burstiness of {trace.name}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("requests", r["requests"]),
        ("failed requests", r["failed_requests"]),
        ("duration (s)", r["duration_s"]),
        ("mean rate (req/s)", r["mean_rate_rps"]),
        *((f"peak/avg {k}", v) for k, v in r["peak_to_average"].items()),
        ("inter-arrival CV", r["interarrival_cv"]),
        ("index of dispersion (1 s)", r["index_of_dispersion_1s"]),
        ("Hurst (aggregated variance)", r["hurst"]),
        ("Gamma shape k", r["gamma_shape"]),
        *(
            (
                f"{side} tokens mean/p50/p90/p99",
                "/".join(_fmt(r[side + "_tokens"][q]) for q in ("mean", "p50", "p90", "p99")),
            )
            for side in ("input", "output")
        ),
        ("verdict", r["verdict"]),
    ]
    for name, value in rows:
        table.add_row(name, _fmt(value))
    Console().print(table)


@pattern_options(positional=True)
def generate(
    pattern_spec: PatternSpec,
    out: Annotated[Path, typer.Option("--out", help="Output file (burstguard JSONL).")],
) -> None:
    """Write a synthetic bursty workload in burstguard's JSONL format."""
    from burstguard.workload.traces import write_workload

    workload = synthesize(pattern_spec)
    write_workload(out, workload)
    what = f"{len(workload)} requests"
    if "sessions" in workload.meta:
        kind = "agent runs" if workload.meta["session_kind"] == "agent" else "conversations"
        what += f" ({workload.meta['sessions']} {kind} starting)"
    print(f"wrote {what} over {pattern_spec.duration_s:g} s to {out}")


def register(app: typer.Typer) -> None:
    """Adds analyze and generate."""
    app.command()(analyze)
    app.command()(generate)
