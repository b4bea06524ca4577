"""Simulated requests per wall second of `burstguard sim` (issue 3 target: 100k < 20 s;
issue 22: 100k requests over 8 replicas behind the gateway < 60 s on one core; issue 34:
100k on one engine <= 8 s, 100k over 8 replicas behind the gateway <= 20 s, a 24 h
gamma (CV 2) day at 20 req/s mean, diurnal, over a kpa-autoscaled fleet of 1-64 replicas
<= 60 s).

The default fast-forwards runs of pure decode steps (same results, see
tests/unit/test_sim_engine.py and tests/unit/test_sim_fleet_fast_forward.py); the Azure
trace and the fleet also run one step at a time, for the ratio.

The figures are for the mypyc build of the hot modules (setup.py; `make venv` runs `make
compiled`); the first line says which build ran. docs/measurements/2026-12-07-sim-scale-2.md
has both builds' figures.

Run: flock /work/notes/bench.lock .venv/bin/python benchmarks/bench_sim.py [--day-hours H]
(`--day-hours 0` skips the day; it is the longest case.)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.sim import loop
from burstguard.sim.loop import simulate
from burstguard.workload.synth import PatternSpec, synthesize
from burstguard.workload.traces import load_workload

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples" / "traces" / "azure2023_code.csv"


def run(name: str, workload, config: EngineConfig, fast_forward: bool = True) -> None:  # type: ignore[no-untyped-def]
    profile = Profile.load("llama3-8b-h100")
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(workload, config, profile, fast_forward=fast_forward)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"{name}: {len(workload):,} requests, {result.steps:,} steps in {wall:.2f} s wall "
        f"({cpu:.2f} s CPU) = {len(workload) / wall:,.0f} simulated req/s "
        f"({result.end_s:,.0f} s of engine time)"
    )


def run_fleet(  # type: ignore[no-untyped-def]
    name: str, workload, scaling: str | None, fast_forward: bool = True, replicas: int = 8,
    min_replicas: int | None = None,
) -> None:  # fmt: skip
    """The gateway core in front of `replicas` replicas (or an autoscaler with at most
    that many, starting from `min_replicas`)."""
    from burstguard.core.scaling import load_policy
    from burstguard.sim.defaults import fleet_gateway
    from burstguard.sim.gateway_loop import simulate_gateway

    policy = None
    start = replicas
    if scaling is not None:
        policy = load_policy(scaling).with_overrides(max_replicas=replicas)
        if min_replicas is not None:
            policy = policy.with_overrides(min_replicas=min_replicas)
            start = min_replicas
    profile = Profile.load("llama3-8b-h100")
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate_gateway(workload, EngineConfig(), profile, fleet_gateway(replicas), start,
                           scaling=policy, fast_forward=fast_forward)  # fmt: skip
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    cost = f", {res.scaling['replica_seconds']:,.0f} replica-s" if res.scaling else ""
    print(
        f"{name}: {len(workload):,} requests, {res.steps:,} steps in {wall:.2f} s wall "
        f"({cpu:.2f} s CPU: the figure on a shared machine) = "
        f"{len(workload) / wall:,.0f} simulated req/s{cost}"
    )


def day(hours: float) -> None:
    """A production day: gamma arrivals (CV 2) at 20 req/s mean under a diurnal envelope
    (period 24 h), through the gateway into a kpa-autoscaled fleet of 1-64 replicas."""
    spec = PatternSpec(
        pattern="gamma", burstiness=0.25, rate=20.0, duration_s=hours * 3600, seed=1,
        envelope="diurnal", envelope_params={"period_s": 86_400.0},
        prompt_tokens="lognormal:mean=512,sigma=0.8", output_tokens="lognormal:mean=128,sigma=0.8",
    )  # fmt: skip
    run_fleet(f"{hours:g} h day (gamma CV 2, 20 req/s mean, diurnal), kpa 1-64 replicas",
              synthesize(spec), "kpa", replicas=64, min_replicas=1)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day-hours", type=float, default=24.0, help="0: skip the day")
    args = parser.parse_args()
    compiled = Path(loop.__file__ or "").suffix == ".so"
    print(f"build: {'mypyc-compiled' if compiled else 'plain Python (no `make compiled`)'}")
    azure = load_workload(AZURE)
    run("azure code trace, one step at a time", azure, EngineConfig(), fast_forward=False)
    run("azure code trace", azure, EngineConfig())
    spec = PatternSpec(
        pattern="poisson", rate=20.0, duration_s=5_000, seed=1,
        prompt_tokens="lognormal:mean=512,sigma=0.8", output_tokens="lognormal:mean=128,sigma=0.8",
    )  # fmt: skip
    run("100k synthetic (Poisson 20 req/s)", synthesize(spec), EngineConfig())
    fleet = PatternSpec(
        pattern="gamma", burstiness=0.25, rate=160.0, duration_s=625, seed=1,
        prompt_tokens="lognormal:mean=512,sigma=0.8", output_tokens="lognormal:mean=128,sigma=0.8",
    )  # fmt: skip
    workload = synthesize(fleet)
    run_fleet("100k over 8 replicas, one step at a time", workload, None, fast_forward=False)
    run_fleet("100k over 8 replicas behind the gateway (gamma CV 2, 160 req/s)", workload, None)
    run_fleet("the same, kpa scaling 8 replicas at most", workload, "kpa")
    if args.day_hours > 0:
        day(args.day_hours)


if __name__ == "__main__":
    main()
