"""Optuna (TPE, NSGA-II) vs coordinate descent on the same budget of simulations
(issue 34): the engine flags and a kpa policy searched jointly on a fleet, on two traces.
Coordinate descent runs to its end; its number of simulations is the budget the Optuna
searches get (a TPE pruning slice counts as its share). Printed per trace and search:
simulations spent, the best goodput per replica-second, and the frontier's hypervolume
(cost vs SLO attainment, against 1.1x the most replica-seconds any search paid and 0%
attainment: larger is better; the same reference for all three searches of a trace).

Run: flock /work/notes/bench.lock .venv/bin/python benchmarks/bench_tune.py [--minutes M]
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--minutes", type=float, default=15.0, help="of each trace, from t=0")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from burstguard.core.scaling import load_policy

    base = load_policy("kpa").with_overrides(max_replicas=8, cold_start_s=30.0)
    knobs = {**scaling_knobs(base.model_dump(mode="json")), **ENGINE_KNOBS}
    default_values = {k: ",".join(map(str, knobs[k].default_values)) for k in knobs}
    items = [a if "=" in a else f"{a}={default_values[a]}" for a in AXES]
    axes = parse_axes(items, knobs, optional=ENGINE_KNOBS)
    for name in TRACES:
        workload = slice_window(load_workload(ROOT / "examples" / "traces" / name), 0,
                                args.minutes * 60)  # fmt: skip
        slos = ClassSlos.parse("ttft=2,tpot=0.1")
        objective = ScalingObjective(workload, EngineConfig(), Profile.load("llama3-8b-h100"),
                                     slos, "kpa", 8, 30.0)  # fmt: skip
        start = objective.start(axes)
        rows = []
        t0 = time.perf_counter()
        with Runner(objective, args.workers) as runner:
            cd = coordinate_descent(axes, start, runner, objective.valid)
        rows.append(("descent", float(len(cd)), cd, time.perf_counter() - t0))
        budget = float(len(cd))
        for strategy in ("tpe", "nsga2"):
            t0 = time.perf_counter()
            part = replace(objective, workload=head(workload, SLICE_SHARE))
            with Runner(objective, args.workers) as runner, Runner(part, args.workers) as sl:
                found = optuna_search(strategy, axes, runner, budget, objective.valid,
                                      sl if strategy == "tpe" else None, start=start)  # fmt: skip
            rows.append((strategy, budget, found, time.perf_counter() - t0))
        ref = 1.1 * max(t.replica_seconds for _, _, ts, _ in rows for t in ts)
        print(f"\n{name}, first {args.minutes:g} min ({len(workload):,} requests), "
              f"kpa 1-8 replicas + engine flags, budget {budget:.0f} simulations")  # fmt: skip
        print(f"  {'search':<8} {'full runs':>9} {'best goodput/replica-s':>23} "
              f"{'frontier hypervolume':>21} {'points':>6} {'wall s':>7}")  # fmt: skip
        for strategy, _, trials, wall in rows:
            front = pareto_front(trials)
            print(f"  {strategy:<8} {len(trials):>9} {best(trials).goodput_per_replica_s:>23.4f} "
                  f"{hypervolume(front, ref):>21.1f} {len(front):>6} {wall:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
