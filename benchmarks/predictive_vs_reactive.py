"""Predictive vs the KEDA queue-depth preset on the real traces, each at its best threshold
(issue 22's must-show): for each trace, a grid over each policy's threshold on the
simulated fleet (llama3-8b-h100 replicas, the default cold start), the tune objective
(SLO-meeting requests per replica-second) picks each policy's best; the table shows SLO
attainment and replica-seconds of every point, so where predictive loses is visible.

Run: .venv/bin/python benchmarks/predictive_vs_reactive.py [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.tune.objective import ClassSlos, ScalingObjective
from burstguard.tune.search import Runner, best, grid_search
from burstguard.workload.traces import load_workload

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
SLO = "ttft=1,tpot=0.05"
GRID = {
    "keda-queue": (1.0, 2.0, 5.0, 10.0, 20.0),  # waiting requests per replica
    "predictive": (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0),  # req/s per replica
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-replicas", type=int, default=16)
    args = ap.parse_args()
    profile = Profile.load("llama3-8b-h100")
    for name in ("azure2023_code.csv", "mooncake_conversation.jsonl"):
        workload = load_workload(TRACES / name)
        print(f"\n## {name}: {len(workload):,} requests over {workload.arrival_s[-1]:,.0f} s")
        print(f"{'policy':<12} {'threshold':>9} {'SLO':>7} {'replica-s':>10} "
              f"{'goodput/replica-s':>18} {'scale events':>12}")  # fmt: skip
        for policy, thresholds in GRID.items():
            obj = ScalingObjective(workload, EngineConfig(), profile, ClassSlos.parse(SLO),
                                   policy, max_replicas=args.max_replicas)  # fmt: skip
            t0 = time.monotonic()
            with Runner(obj, args.workers) as runner:
                trials = grid_search([(("threshold", t),) for t in thresholds], runner)
            top = best(trials)
            for t in trials:
                mark = "  <- best" if t is top else ""
                print(f"{policy:<12} {t.candidate[0][1]:>9g} {t.attainment:>7.1%} "
                      f"{t.replica_seconds:>10,.0f} {t.goodput_per_replica_s:>18.4f} "
                      f"{t.extra['scale_events']:>12}{mark}")  # fmt: skip
            print(f"  ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
