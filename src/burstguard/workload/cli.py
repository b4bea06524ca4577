"""CLI: `burstguard analyze` (how bursty is a trace) and `burstguard generate` (synthesise one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from burstguard.errors import UserError
from burstguard.workload.synth import PATTERNS, PatternSpec, synthesize


def _range(text: str, kind: type, name: str) -> tuple:
    low, sep, high = text.partition("-")
    try:
        lo, hi = kind(low), kind(high if sep else low)
    except ValueError:
        raise UserError(f"{name} {text!r}: expected A-B (e.g. 15-30)") from None
    if lo <= 0 or hi < lo:
        raise UserError(f"{name} {text!r}: expected 0 < A <= B")
    return lo, hi


def _envelope(text: str | None) -> tuple[str | None, dict[str, float]]:
    if not text:
        return None, {}
    kind, _, rest = text.partition(":")
    params: dict[str, float] = {}
    for part in filter(None, rest.split(",")):
        key, sep, value = part.partition("=")
        try:
            params[key] = float(value)
        except ValueError:
            raise UserError(f"--envelope {text!r}: expected key=number in {part!r}") from None
        if not sep:
            raise UserError(f"--envelope {text!r}: expected key=number in {part!r}")
    return kind, params


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
) -> None:
    """Describe how bursty a trace is: peak-to-average, CV, Hurst, Gamma fit, token stats."""
    from burstguard.workload.metrics import analyze as analyze_workload
    from burstguard.workload.traces import load_workload

    if plot is not None and plot.suffix.lower() not in (".png", ".html"):
        raise UserError(f"--plot {plot}: use a .png or .html file name")
    workload = load_workload(trace, fmt)
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


def generate(
    pattern: Annotated[str, typer.Argument(help=f"Arrival pattern: {', '.join(PATTERNS)}.")],
    out: Annotated[Path, typer.Option("--out", help="Output file (burstguard JSONL).")],
    duration: Annotated[float, typer.Option("--duration", help="Seconds of traffic.")] = 60.0,
    rate: Annotated[float | None, typer.Option("--rate", help="Mean request rate (req/s).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    burstiness: Annotated[
        float, typer.Option("--burstiness", help="gamma: shape k (CV = 1/sqrt(k)).")
    ] = 1.0,
    burst_size: Annotated[
        str, typer.Option("--burst-size", help="burst: requests per burst, A-B.")
    ] = "15-30",
    idle: Annotated[
        str,
        typer.Option("--idle", help="burst: idle gap seconds, A-B (scaled to --rate when given)."),
    ] = "5-15",
    hurst: Annotated[
        float, typer.Option("--hurst", help="pareto: target Hurst exponent (0.5-1).")
    ] = 0.8,
    mmpp: Annotated[
        str, typer.Option("--mmpp", help="mmpp: RATE_ON,RATE_OFF,MEAN_ON_S,MEAN_OFF_S.")
    ] = "20,1,2,10",
    envelope: Annotated[
        str | None, typer.Option("--envelope", help="ramp|step|diurnal[:key=v,...] rate envelope.")
    ] = None,
    prompt_tokens: Annotated[
        str,
        typer.Option(
            "--prompt-tokens",
            help="Length spec: N, uniform:A-B, lognormal:mean=M,sigma=S, zipf:a=A,max=M, "
            "empirical:TRACE.",
        ),
    ] = "512",
    output_tokens: Annotated[
        str, typer.Option("--output-tokens", help="Length spec, as --prompt-tokens.")
    ] = "128",
    classes: Annotated[
        str | None, typer.Option("--classes", help="Class mix, e.g. interactive=0.7,batch=0.3.")
    ] = None,
    tenants: Annotated[
        str | None, typer.Option("--tenants", help="Tenant mix, e.g. a=0.5,b=0.5.")
    ] = None,
) -> None:
    """Write a synthetic bursty workload in burstguard's JSONL format."""
    from burstguard.workload.traces import write_workload

    try:
        on, off, t_on, t_off = (float(x) for x in mmpp.split(","))
    except ValueError:
        raise UserError(
            f"--mmpp {mmpp!r}: expected RATE_ON,RATE_OFF,MEAN_ON_S,MEAN_OFF_S"
        ) from None
    env_kind, env_params = _envelope(envelope)
    spec = PatternSpec(
        pattern=pattern,
        duration_s=duration,
        rate=rate,
        seed=seed,
        burstiness=burstiness,
        burst_size=_range(burst_size, int, "--burst-size"),
        idle_s=_range(idle, float, "--idle"),
        mmpp_rate_on=on,
        mmpp_rate_off=off,
        mmpp_mean_on_s=t_on,
        mmpp_mean_off_s=t_off,
        hurst=hurst,
        envelope=env_kind,
        envelope_params=env_params,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        classes=classes,
        tenants=tenants,
    )
    workload = synthesize(spec)
    write_workload(out, workload)
    print(f"wrote {len(workload)} requests over {duration:g} s to {out}")


def register(app: typer.Typer) -> None:
    """Adds analyze and generate."""
    app.command()(analyze)
    app.command()(generate)
