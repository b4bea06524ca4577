"""Speed of the workload library: generate 1M arrivals, analyze a 1M-request trace.

Targets (issue 2, 2-core machine): generate < 2 s, analyze < 5 s. Prints the figures.
Run: .venv/bin/python benchmarks/bench_workload.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from burstguard.workload.metrics import analyze
from burstguard.workload.synth import PatternSpec, synthesize
from burstguard.workload.traces import load_workload, write_workload

N = 1_000_000


def main() -> None:
    rate = 100.0
    spec = PatternSpec(pattern="gamma", burstiness=0.25, rate=rate, duration_s=N / rate, seed=1)
    t0 = time.perf_counter()
    workload = synthesize(spec)
    t_gen = time.perf_counter() - t0
    print(f"generate gamma: {len(workload):,} requests in {t_gen:.2f} s (target < 2 s)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        write_workload(path, workload)
        t0 = time.perf_counter()
        loaded = load_workload(path)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = analyze(loaded)
        t_an = time.perf_counter() - t0
    print(f"read 1M-request burstguard JSONL: {t_load:.2f} s; analyze: {t_an:.2f} s")
    print(f"analyze total (read + metrics): {t_load + t_an:.2f} s (target < 5 s)")
    print(f"check: CV {result['interarrival_cv']:.3f} (expected 2.0), verdict {result['verdict']}")


if __name__ == "__main__":
    main()
