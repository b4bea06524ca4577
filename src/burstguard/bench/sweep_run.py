"""`bench --sweep`: one bench leg per load against a live target, then the knee.

Each point is an ordinary leg (`bench.leg.run_bench`) in its own OUT/NN-AXIS-LOAD/ (records,
summary, HTML-reportable on its own); sweep.json is rewritten after every point, so a sweep
cut short still says what it measured. Points run from the lowest load up and the sweep
stops at the first that misses the stop rule: past it the server is only queueing, and
each further point costs more time to drain.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from burstguard.bench.leg import run_bench
from burstguard.bench.progress import make_reporter
from burstguard.bench.runner import BenchConfig
from burstguard.report.sweep import (
    Point,
    StopRule,
    SweepSpec,
    Window,
    point_from_records,
    sweep_doc,
    write_sweep,
)
from burstguard.wire.records import read_records
from burstguard.workload.synth import PatternSpec, shape_pool, synthesize


def point_dir(out: Path, index: int, spec: SweepSpec, load: float) -> Path:
    return out / f"{index:02d}-{spec.axis}-{load:g}"


def run_sweep(
    config: BenchConfig,
    spec: SweepSpec,
    shape_spec: PatternSpec,
    window: Window,
    rule: StopRule,
    *,
    pattern: str = "poisson",
    quiet: bool = False,
) -> dict[str, Any]:
    """Runs the points in turn (open loop at each rate with `pattern`, or a closed loop
    of each many users), writes OUT/sweep.json and returns it."""
    points: list[Point] = []
    stopped: str | None = None
    meta = {
        "target": config.target, "model": config.model, "pattern": pattern
        if spec.axis == "rate" else None, "prompt_tokens": shape_spec.prompt_tokens,
        "output_tokens": shape_spec.output_tokens, "seed": shape_spec.seed,
        "speedup": config.speedup, "interrupted": False,
    }  # fmt: skip
    # a point past saturation ends with a queue; waiting one more duration for it is
    # enough (what is still queued then is counted unfinished, an SLO miss)
    drain_s = max(5.0, window.duration_s / config.speedup)
    for i, load in enumerate(spec.values):
        where = point_dir(config.out_dir, i, spec, load)
        label = f"{spec.axis} {load:g}"
        cfg = dataclasses.replace(
            config, out_dir=where, label=label, drain_s=drain_s, duration_s=window.duration_s,
            concurrency=int(load) if spec.axis == "concurrency" else None,
        )  # fmt: skip
        if spec.axis == "rate":
            workload = synthesize(dataclasses.replace(shape_spec, pattern=pattern, rate=load))
        else:
            workload = shape_pool(shape_spec)
        print(f"[sweep {i + 1}/{len(spec.values)}] {label} {spec.unit} for "
              f"{window.duration_s:g} s -> {where}", flush=True)  # fmt: skip
        summary = run_bench(cfg, workload, make_reporter(label, quiet))
        records = list(read_records(where / "records.jsonl"))
        point = point_from_records(load, records, window, config.slo, dir=where.name)
        points.append(point)
        print(f"  {point_line(point, spec)}", flush=True)
        if summary["interrupted"]:
            stopped, meta["interrupted"] = "interrupted", True
        elif (why := rule.miss(point)) is not None:
            stopped = f"{label}: {why}"
        doc = sweep_doc(spec, points, rule, window=window, slo=config.slo, stopped=stopped,
                        meta=meta)  # fmt: skip
        write_sweep(config.out_dir / "sweep.json", doc)
        if stopped is not None:
            print(f"  stop: {stopped}", flush=True)
            break
    return doc


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def point_line(p: Point, spec: SweepSpec) -> str:
    """One point in one line (its progress line and a row of the final table)."""
    att = "-" if p.slo_attainment is None else f"{p.slo_attainment:.0%}"
    return (
        f"offered {p.offered_rps:.2f} achieved {p.achieved_rps:.2f} req/s  TTFT p50/p95 "
        f"{_ms(p.ttft_p50_s)}/{_ms(p.ttft_p95_s)} ms  TPOT p50/p95 {_ms(p.tpot_p50_s)}/"
        f"{_ms(p.tpot_p95_s)} ms  SLO {att}  errors {p.errors}"
        + (f"  unfinished {p.unfinished}" if p.unfinished else "")
    )


def print_sweep(doc: dict[str, Any], out: Path) -> None:
    """The points as a table and the knee with its reason."""
    unit = doc["unit"]
    head = f"{doc['axis']:>11}  {'offered':>7}  {'achieved':>8}  {'TTFT p50':>8}  "
    print(head + f"{'p95':>6}  {'TPOT p95':>8}  {'SLO':>5}  {'err':>4}")
    for p in doc["points"]:
        att = "-" if p["slo_attainment"] is None else f"{p['slo_attainment']:.0%}"
        print(f"{p['load']:>11g}  {p['offered_rps']:>7.2f}  {p['achieved_rps']:>8.2f}  "
              f"{_ms(p['ttft_p50_s']):>8}  {_ms(p['ttft_p95_s']):>6}  "
              f"{_ms(p['tpot_p95_s']):>8}  {att:>5}  {p['errors']:>4}")  # fmt: skip
    knee = doc["knee"]
    if knee["load"] is None:
        print(f"no knee: {knee['reason']}")
    else:
        bound = "" if knee["bounded"] else " (at least)"
        print(f"knee: {knee['load']:g} {unit}{bound}: {knee['reason']}")
    print(f"sweep in {out}/ (sweep.json, one directory per point)")


def steady_from_sweep(
    path: Path, shape_spec: PatternSpec, config: BenchConfig
) -> tuple[PatternSpec | None, BenchConfig]:
    """--scenario steady-vs-burst's steady point from a sweep's knee: Poisson at the knee
    rate (open loop), or the knee's users (closed loop). Returns (pattern_spec, config)
    as the scenario takes them; ValueError when the file is no sweep or found no knee."""
    from burstguard.report.sweep import knee_of, read_sweep

    axis, load = knee_of(read_sweep(path), path)
    if axis == "rate":
        pattern = dataclasses.replace(shape_spec, pattern="poisson", rate=load)
        return pattern, dataclasses.replace(config, concurrency=None)
    return None, dataclasses.replace(config, concurrency=int(load))
