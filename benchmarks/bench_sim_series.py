"""What recording the engine series (`sim/series.py`) costs the simulator: the same run
with the recorder and with its `observe` replaced by a no-op, alternated three times.

Run: .venv/bin/python benchmarks/bench_sim_series.py
"""

from __future__ import annotations

import time

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.sim import series
from burstguard.sim.loop import simulate
from burstguard.workload.synth import PatternSpec, synthesize


def main() -> None:
    workload = synthesize(
        PatternSpec(pattern="poisson", rate=20, duration_s=1000,
                    prompt_tokens="lognormal:mean=512,sigma=1",
                    output_tokens="lognormal:mean=128,sigma=1")
    )  # fmt: skip
    profile = Profile.load("llama3-8b-h100")
    observe = series.SeriesRecorder.observe
    for _ in range(3):
        for label in ("with", "without"):
            off = lambda self, now, tokens=0, steps=0: None  # noqa: E731
            setattr(series.SeriesRecorder, "observe", observe if label == "with" else off)  # noqa: B010
            start = time.perf_counter()
            result = simulate(workload, EngineConfig(), profile)
            took = time.perf_counter() - start
            print(
                f"{label:>7} series: {len(workload)} requests, {result.steps} steps, {took:.2f} s"
            )
    series.SeriesRecorder.observe = observe  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
