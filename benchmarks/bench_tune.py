"""Optuna (TPE, NSGA-II, MOTPE) vs coordinate descent on the same budget of simulations
(issue 34): the engine flags and a kpa policy searched jointly on a fleet, on two traces
(or a window of them: --from-minute, --minutes). Coordinate descent runs to its end; its
number of simulations is the budget the Optuna searches get, from the same start
(`tpe+prune`: a pruning slice counts as its share). Each Optuna search runs on --seeds
sampler seeds (median, min-max printed). Printed per trace and search: simulations
spent, the best goodput per replica-second, and the frontier's hypervolume (cost vs SLO
attainment, against 1.1x the most replica-seconds any search of the table paid and 0%
attainment: larger is better; one reference per table, so compare within a table).

Run: flock /work/notes/bench.lock .venv/bin/python benchmarks/bench_tune.py [--minutes M]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.tune.cli import head
from burstguard.tune.objective import ClassSlos, ScalingObjective, Trial
from burstguard.tune.search import Runner, best, coordinate_descent, pareto_front
from burstguard.tune.space import ENGINE_KNOBS, parse_axes, scaling_knobs
from burstguard.tune.study import SLICE_SHARE, optuna_search
from burstguard.workload.traces import load_workload
from burstguard.workload.transform import slice_window

ROOT = Path(__file__).resolve().parent.parent
TRACES = ["azure2023_code.csv", "mooncake_conversation.jsonl"]
SEARCHES = ("tpe", "tpe+prune", "nsga2", "motpe")
AXES = ["max-num-seqs=16,64,256", "max-num-batched-tokens=2048,8192", "threshold",
        "window", "min-replicas=1,2", "cooldown=0,120"]  # fmt: skip


def hypervolume(front: list[Trial], ref_cost: float) -> float:
    """Area dominated by the (replica-seconds, attainment) front up to `ref_cost`."""
    area, prev_att = 0.0, 0.0
    for t in front:  # cheapest first, attainment rising
        if t.replica_seconds < ref_cost and t.attainment > prev_att:
            area += (ref_cost - t.replica_seconds) * (t.attainment - prev_att)
            prev_att = t.attainment
    return area


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="of each trace")
    parser.add_argument("--from-minute", type=float, default=0.0, help="where the window starts")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3, help="Optuna sampler seeds 0..N-1")
    parser.add_argument("--searches", default=",".join(SEARCHES),
                        help=f"Optuna searches, of {','.join(SEARCHES)}")  # fmt: skip
    parser.add_argument("--traces", default=",".join(TRACES))
    args = parser.parse_args()
    from burstguard.core.scaling import load_policy

    base = load_policy("kpa").with_overrides(max_replicas=8, cold_start_s=30.0)
    knobs = {**scaling_knobs(base.model_dump(mode="json")), **ENGINE_KNOBS}
    default_values = {k: ",".join(map(str, knobs[k].default_values)) for k in knobs}
    items = [a if "=" in a else f"{a}={default_values[a]}" for a in AXES]
    axes = parse_axes(items, knobs, optional=ENGINE_KNOBS)
    searches = args.searches.split(",")
    for name in args.traces.split(","):
        t_from = args.from_minute * 60
        trace = load_workload(ROOT / "examples" / "traces" / name)
        workload = slice_window(trace, t_from, t_from + args.minutes * 60)
        slos = ClassSlos.parse("ttft=2,tpot=0.1")
        objective = ScalingObjective(workload, EngineConfig(), Profile.load("llama3-8b-h100"),
                                     slos, "kpa", 8, 30.0)  # fmt: skip
        start = objective.start(axes)
        t0 = time.perf_counter()
        with Runner(objective, args.workers) as runner:
            cd = coordinate_descent(axes, start, runner, objective.valid)
        rows: list[tuple[str, list[tuple[float, list[Trial]]], float]] = [
            ("descent", [(float(len(cd)), cd)], time.perf_counter() - t0)
        ]
        budget = float(len(cd))
        part = replace(objective, workload=head(workload, SLICE_SHARE))
        for search in searches:
            strategy, prune = search.removesuffix("+prune"), search.endswith("+prune")
            runs, t0 = [], time.perf_counter()
            for seed in range(args.seeds):
                with Runner(objective, args.workers) as runner, Runner(part, args.workers) as sl:
                    pruner = sl if prune else None
                    found = optuna_search(strategy, axes, runner, budget, objective.valid,
                                          pruner, start=start, seed=seed)  # fmt: skip
                    runs.append((runner.evaluations + SLICE_SHARE * sl.evaluations, found))
            rows.append((search, runs, (time.perf_counter() - t0) / args.seeds))
        ref = 1.1 * max(t.replica_seconds for _, runs, _ in rows for _, ts in runs for t in ts)
        print(f"\n{name}, minutes {args.from_minute:g}-{args.from_minute + args.minutes:g} "
              f"({len(workload):,} requests), kpa 1-8 replicas + engine flags, budget "
              f"{budget:.0f} simulations; Optuna: median (min-max) over seeds "
              f"0-{args.seeds - 1}")  # fmt: skip
        print(f"  {'search':<11} {'sims':>5} {'best goodput/replica-s':>25} "
              f"{'frontier hypervolume':>25} {'wall s':>7}")  # fmt: skip
        for search, runs, wall in rows:
            goods = [best(ts).goodput_per_replica_s for _, ts in runs]
            vols = [hypervolume(pareto_front(ts), ref) for _, ts in runs]
            sims = max(spent for spent, _ in runs)
            print(f"  {search:<11} {sims:>5.1f} {spread(goods, 4):>25} {spread(vols, 1):>25} "
                  f"{wall:>7.1f}")  # fmt: skip


def spread(values: list[float], digits: int) -> str:
    """One value as is; several as `median (min-max)`."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")  # fmt: skip


if __name__ == "__main__":
    main()
