"""CLI: `burstguard tune` — search engine flags, an autoscaling policy, or both jointly,
in virtual time for the best goodput per replica-second under per-class SLOs; prints the
Pareto frontier and the chosen config."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.engine_options import engine_options
from burstguard.errors import UserError, check_writable
from burstguard.tune.objective import (
    ClassSlos,
    EngineObjective,
    ScalingObjective,
    Trial,
    jittered,
)
from burstguard.tune.search import (
    Runner,
    best,
    coordinate_descent,
    grid_search,
    pareto_front,
    rank_key,
)
from burstguard.tune.space import (
    ENGINE_KNOBS,
    Candidate,
    describe,
    grid,
    parse_axes,
    scaling_knobs,
    split,
)
from burstguard.tune.study import SLICE_SHARE, optuna_search
from burstguard.workload.options import TraceFileOption, TraceFormatOption, pattern_options
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec

if TYPE_CHECKING:
    from burstguard.tune.ray_runner import RayRunner

SEARCHES = ("tpe", "nsga2", "motpe", "descent", "grid")
ROBUST_TOLERANCE = 0.05
"""The winner is robust when no other finalist beats it by more than this on the second
seed (the workload's own variance moves every finalist alike, so it is only reported)."""


@pattern_options()
@engine_options
def tune(
    profile: Profile,
    engine_config: EngineConfig,
    pattern_spec: PatternSpec | None,
    trace: TraceFileOption = None,
    trace_format: TraceFormatOption = None,
    axis: Annotated[
        list[str] | None,
        typer.Option(
            "--axis",
            help="KNOB=V1,V2,... values to try (repeatable); engine knobs: "
            + ", ".join(ENGINE_KNOBS)
            + "; with --autoscaler: policy, threshold, window, min-replicas, cooldown, and "
            "any engine knob (searched jointly). Knobs not named take their default values.",
        ),
    ] = None,
    search: Annotated[
        str,
        typer.Option(
            "--search",
            help="tpe (Optuna's TPE on goodput per replica-s) | nsga2 (Optuna's NSGA-II: "
            "the goodput vs replica-seconds frontier) | motpe (Optuna's TPE on that "
            "frontier) | descent (coordinate descent) | grid (every combination)",
        ),
    ] = "descent",
    budget: Annotated[
        float,
        typer.Option(
            "--budget",
            help="tpe/nsga2/motpe: simulations of the whole workload to spend (a pruning "
            "slice costs its share)",
        ),
    ] = 30.0,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="tpe: run each candidate on the workload's first fifth of requests first "
            "and stop the worst quarter there (pays only where a slice ranks candidates as "
            "the whole workload does)",
        ),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run the trials as Ray tasks on the Ray cluster at ADDRESS (auto, or "
            "HOST:PORT; the trace is shipped once through its object store); needs "
            "burstguard[ray]. Without it: --workers local processes.",
        ),
    ] = None,
    slo: Annotated[
        str, typer.Option("--slo", help="default SLO, e.g. ttft=0.5,tpot=0.05 (seconds)")
    ] = "ttft=0.5,tpot=0.05",
    class_slo: Annotated[
        list[str] | None,
        typer.Option("--class-slo", help="CLASS:ttft=S,tpot=S for one class (repeatable)"),
    ] = None,
    autoscaler: Annotated[
        str | None,
        typer.Option(
            "--autoscaler",
            help="Tune this scaling policy's knobs (policy, threshold, window, min-replicas, "
            "cooldown) on the simulated fleet; engine flags join the search when named "
            "with --axis, or all of them with --joint.",
            rich_help_panel="Autoscaling",
        ),
    ] = None,
    joint: Annotated[
        bool,
        typer.Option(
            "--joint",
            help="With --autoscaler: search the engine flags (their default values, or the "
            "--axis ones) jointly with the policy, every replica running them.",
            rich_help_panel="Autoscaling",
        ),
    ] = False,
    max_replicas: Annotated[
        int | None,
        typer.Option(
            "--max-replicas",
            help="the fleet's maximum (fixed while tuning)",
            rich_help_panel="Autoscaling",
        ),
    ] = None,
    cold_start_s: Annotated[
        float | None,
        typer.Option(
            "--cold-start-s", help="a fixed cold start (seconds)", rich_help_panel="Autoscaling"
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", help="worker processes (default: the machine's cores)")
    ] = 0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write every trial and the winner here.")
    ] = None,
) -> None:
    """Tune the engine flags, or with --autoscaler the scaling policy on a simulated fleet
    (with --joint, or engine knobs named in --axis: both at once), on a trace or a
    pattern: prints the Pareto frontier (cost vs SLO attainment) and the config with the
    best goodput per replica-second, re-checked on a second seed.

    A joint search multiplies the grids (the default one has thousands of points): the
    default coordinate descent tries one knob at a time (its best goodput measured ahead
    of Optuna's on the same budget, benchmarks/bench_tune.py); tpe spends --budget
    simulations (with --prune, stopping hopeless candidates on a slice of the workload);
    nsga2 and motpe spend them on the cost vs goodput frontier; all three start from the
    base config's one-knob neighbours; --ray spreads the trials over a cluster."""
    if (trace is None) == (pattern_spec is None):
        raise UserError("give exactly one of --trace FILE or --pattern NAME")
    if search not in SEARCHES:
        raise UserError(f"--search must be one of {', '.join(SEARCHES)} (got {search!r})")
    if prune and search != "tpe":
        raise UserError("--prune needs --search tpe")
    if budget < 1:
        raise UserError("--budget must be >= 1 (simulations of the whole workload)")
    if workers < 0:
        raise UserError("--workers must be >= 0 (0: one per core)")
    if json_out is not None:
        check_writable(json_out, "--json")
    slos = ClassSlos.parse(slo, class_slo or [])
    workload, second = _workloads(trace, trace_format, pattern_spec)
    objective: EngineObjective | ScalingObjective
    if autoscaler is not None:
        from burstguard.core.scaling import load_policy

        base = load_policy(autoscaler).with_overrides(
            max_replicas=max_replicas, cold_start_s=cold_start_s
        )
        knobs = {**scaling_knobs(base.model_dump(mode="json")), **ENGINE_KNOBS}
        axes = parse_axes(axis or [], knobs, optional=() if joint else ENGINE_KNOBS)
        objective = ScalingObjective(workload, engine_config, profile, slos, autoscaler,
                                     max_replicas, cold_start_s)  # fmt: skip
    else:
        if max_replicas is not None or cold_start_s is not None or joint:
            raise UserError("--max-replicas, --cold-start-s and --joint need --autoscaler")
        axes = parse_axes(axis or [], ENGINE_KNOBS)
        objective = EngineObjective(workload, engine_config, profile, slos)
    candidates = [c for c in grid(axes) if objective.valid(c)]
    if not candidates:
        raise UserError(
            "no valid combination of the --axis values (vLLM, or the policy's limits, "
            "would refuse each)"
        )
    n_workers = workers or (0 if ray else os.cpu_count() or 1)
    started = time.monotonic()
    start = objective.start(axes)
    if not objective.valid(start):
        start = candidates[0]
    total = len(candidates) if search in ("grid", "descent") else math.ceil(budget)
    with (
        _ProgressBar(total) as advance,
        make_runner(objective, n_workers, advance, ray) as runner,
    ):
        if search == "grid":
            trials = grid_search(candidates, runner)
        elif search == "descent":
            trials = coordinate_descent(axes, start, runner, objective.valid)
        elif prune:
            part = replace(objective, workload=head(workload, SLICE_SHARE))
            with make_runner(part, runner.workers, None, ray) as slices:
                trials = optuna_search(
                    search, axes, runner, budget, objective.valid, slices, start=start
                )
        else:
            trials = optuna_search(search, axes, runner, budget, objective.valid, start=start)
        n_workers = runner.workers
    elapsed = time.monotonic() - started
    winner = best(trials)
    finalists = sorted(trials, key=rank_key, reverse=True)[:3]  # the winner first
    with make_runner(replace(objective, workload=second), n_workers, None, ray) as recheck:
        again = recheck.run([t.candidate for t in finalists])
    verdict = robustness(winner, finalists, again)
    print(frontier_table(pareto_front(trials), winner))
    print(
        f"\n{search}: {runner.evaluations} simulations of {len(candidates)} candidates "
        f"in {elapsed:.1f} s on {n_workers} {'Ray task slot' if ray else 'worker'}(s)"
    )
    print(f"chosen: {describe(winner.candidate)}")
    if split(winner.candidate)[0]:
        print(f"  vllm serve ... {vllm_flags(winner.candidate)}")
    if autoscaler is not None:
        print("  policy file (burstguard sim --autoscaler FILE, scaling export FILE):")
        print("    " + objective.scaling(winner.candidate).to_yaml().replace("\n", "\n    "))  # type: ignore[union-attr]
    print(
        f"  goodput {winner.goodput_per_replica_s:.3f} req per replica-s, "
        f"SLO attainment {winner.attainment:.1%}, {winner.replica_seconds:.0f} replica-s"
    )
    print(verdict["message"])
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(
            json.dumps(
                {"search": search, "wall_s": elapsed, "evaluations": runner.evaluations,
                 "trials": [trial_json(t) for t in trials], "winner": trial_json(winner),
                 "second_seed": [trial_json(t) for t in again], "robust": verdict["robust"]},
                indent=2,
            ) + "\n",
            encoding="utf-8",
        )  # fmt: skip


def make_runner(
    objective: EngineObjective | ScalingObjective,
    workers: int,
    progress: Any,
    ray: str | None,
) -> Runner | RayRunner:
    """Local worker processes, or Ray tasks on the cluster at `ray`."""
    if ray is None:
        return Runner(objective, max(1, workers), progress)
    from burstguard.tune.ray_runner import RayRunner

    return RayRunner(objective, ray, workers, progress)


def head(workload: Workload, share: float) -> Workload:
    """The workload's first `share` of requests (at least one): a pruning slice."""
    import numpy as np

    from burstguard.workload.transform import take

    return take(workload, np.arange(max(1, math.ceil(len(workload) * share))))


def _workloads(
    trace: Path | None, fmt: str | None, spec: PatternSpec | None
) -> tuple[Workload, Workload]:
    """The workload, and the second sample the winner is re-checked on: the pattern with
    the next seed, or the trace with every arrival jittered by up to 1 s."""
    from burstguard.workload.synth import synthesize
    from burstguard.workload.traces import load_workload

    if trace is not None:
        workload = load_workload(trace, fmt)
        second = jittered(workload, seed=1)
    else:
        assert spec is not None
        workload, second = synthesize(spec), synthesize(replace(spec, seed=spec.seed + 1))
    if len(workload) == 0:
        raise UserError("the workload has no requests")
    return workload, second


def robustness(winner: Trial, first: list[Trial], second: list[Trial]) -> dict[str, Any]:
    """Whether the winner stays best on the second seed, with the message saying so."""
    by_candidate = {t.candidate: t for t in second}
    mine = by_candidate[winner.candidate]
    top = best(second)
    change = (mine.goodput_per_replica_s - winner.goodput_per_replica_s) / max(
        winner.goodput_per_replica_s, 1e-12
    )
    ratio = top.goodput_per_replica_s / max(mine.goodput_per_replica_s, 1e-12)
    robust = top.candidate == winner.candidate or ratio <= 1 + ROBUST_TOLERANCE
    if robust:
        message = (
            f"second seed: robust (still within {ROBUST_TOLERANCE:.0%} of the best of the "
            f"{len(first)} finalists; its goodput per replica-s {change:+.1%})"
        )
    else:
        message = (
            f"second seed: NOT robust — {describe(top.candidate)} beats it by {ratio - 1:.1%}; "
            "try a longer trace or another seed"
        )
    return {"robust": robust, "message": message}


def frontier_table(front: list[Trial], winner: Trial) -> str:
    rows = [
        "Pareto frontier (cost vs SLO attainment, whole workload):",
        f"  {'replica-s':>10} {'SLO':>7} {'goodput/replica-s':>18}  config",
    ]
    for t in front:
        mark = "  <- chosen" if t.candidate == winner.candidate else ""
        rows.append(
            f"  {t.replica_seconds:>10.1f} {t.attainment:>7.1%} "
            f"{t.goodput_per_replica_s:>18.3f}  {describe(t.candidate)}{mark}"
        )
    return "\n".join(rows)


def vllm_flags(candidate: Candidate) -> str:
    """The candidate's engine knobs as `vllm serve` flags."""
    parts = []
    for k, v in split(candidate)[0]:
        if isinstance(v, bool):
            parts.append(f"--{'' if v else 'no-'}enable-{k}")
        else:
            parts.append(f"--{k} {v}")
    return " ".join(parts)


def trial_json(t: Trial) -> dict[str, Any]:
    return {
        "config": dict(t.candidate), "requests": t.requests, "met": t.met,
        "replica_seconds": t.replica_seconds, "slo_attainment": t.attainment,
        "goodput_per_replica_s": t.goodput_per_replica_s, **t.extra,
    }  # fmt: skip


class _ProgressBar:
    """A rich progress bar on a terminal, nothing otherwise; yields `advance(n)`."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), transient=True,
        )  # fmt: skip
        self._bar.start()
        task = self._bar.add_task("simulating", total=self.total)
        return lambda n: self._bar.advance(task, n)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()


def register(app: typer.Typer) -> None:
    """Adds tune."""
    app.command()(tune)
