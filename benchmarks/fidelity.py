"""Emulator fidelity against real vLLM-CPU: the profile, then the fidelity table.

    .venv/bin/python benchmarks/fidelity.py               # this machine's automatic fit
    .venv/bin/python benchmarks/fidelity.py --calibrate   # refit the packaged profile

Starts the reference engine (make vllm-cpu). By default the emulator runs this machine's
own calibration, exactly as `make test` and `make demo ENGINE=vllm-cpu` get it
(`vllm_cpu.machine_profile`: fitted once per machine and cached, refitted when its check
failed); `--refit` deletes the cached one first. `--calibrate` instead runs `burstguard
calibrate` by hand into the packaged smollm2-135m-cpu profile. Then the same workloads run
with the same client on vLLM and on `burstguard emulate` and it prints p50/p95 TTFT and
E2E with the relative error. Needs the machine otherwise idle (~8 min, ~12 with a fit).

`--real-runs N` measures the real engine N times, each on a freshly started vLLM (one
server would serve a repeated workload from its prefix cache), and compares the emulator
with the median of the N, printing their range: on a shared machine one vLLM-CPU server's
run can differ from the next one's by more than the bound (docs/fidelity.md), so one real
run is a noisy reference (~6 min more per extra run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from burstguard.calibrate.fidelity import Legs, compare_legs, markdown, pair_up, run_legs
from burstguard.core.engine.profile import machine_profile_path
from burstguard.engines import vllm_cpu
from burstguard.procs import ManagedProcess, free_port

PROFILES = Path(__file__).resolve().parents[1] / "src/burstguard/core/engine/profiles"
PROFILE = PROFILES / "smollm2-135m-cpu.yaml"
VLLM_ARGS = {"max_num_seqs": 32, "max_model_len": 2048}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true", help="refit the packaged profile first")
    ap.add_argument("--refit", action="store_true", help="drop this machine's cached fit first")
    ap.add_argument("--duration", type=float, default=36.0, help="seconds per leg")
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--real-runs", type=int, default=1, metavar="N",
                    help="measure vLLM N times, each on a fresh server (the median is the "
                    "reference)")  # fmt: skip
    args = ap.parse_args()
    if args.real_runs < 1:
        ap.error("--real-runs: at least 1")
    work = Path(tempfile.mkdtemp(prefix="fidelity-"))
    print(f"starting vLLM-CPU (log {work / 'vllm.log'})", flush=True)
    with real_server(work / "vllm.log") as real:
        base = real.base_url  # type: ignore[attr-defined]
        profile = PROFILE
        if args.calibrate:
            subprocess.run(
                [sys.executable, "-m", "burstguard.cli", "calibrate", "--target", base,
                 "--out", str(PROFILE), "--name", "smollm2-135m-cpu", "--description",
                 "SmolLM2-135M-Instruct on vLLM-CPU 0.32.0, 2 cores (fitted by "
                 "benchmarks/fidelity.py --calibrate)"],
                check=True,
            )  # fmt: skip
        else:
            if args.refit:
                machine_profile_path(vllm_cpu.PROFILE_NAME).unlink(missing_ok=True)
            profile = vllm_cpu.machine_profile(base)
            check = yaml.safe_load(profile.read_text())["fitted"]["fit"].get("check", {})
            print(f"profile: this machine's fit {profile}; its check: {check}", flush=True)
        port = free_port()
        emulator = ManagedProcess(
            [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", str(profile),
             "--served-model-name", vllm_cpu.MODEL_NAME, "--port", str(port),
             "--max-num-seqs", str(VLLM_ARGS["max_num_seqs"]),
             "--max-num-batched-tokens", str(args.max_num_batched_tokens)],
            f"http://127.0.0.1:{port}/health", log_path=work / "emulator.log",
        )  # fmt: skip
        emulated = f"http://127.0.0.1:{port}"
        if args.real_runs == 1:
            with emulator:
                rows = compare_legs(base, emulated, work, duration_s=args.duration)
        else:
            runs = [run_legs(base, work, "real-1", duration_s=args.duration)]
    if args.real_runs > 1:
        runs += more_real_runs(work, args.real_runs - 1, args.duration)
        with emulator:
            legs = run_legs(emulated, work, "emulated", duration_s=args.duration)
        rows = pair_up(runs, legs)
    print(markdown(rows))
    worst = max(abs(r.rel_error) for r in rows)
    print(f"worst relative error {worst:.0%} over {len(rows)} figures; runs in {work}")
    return 0


def real_server(log: Path) -> ManagedProcess:
    return vllm_cpu.server(
        log_path=log, startup_timeout_s=400.0,
        max_num_seqs=VLLM_ARGS["max_num_seqs"], max_model_len=VLLM_ARGS["max_model_len"],
    )  # fmt: skip


def more_real_runs(work: Path, n: int, duration_s: float) -> list[Legs]:
    """`n` more passes over the workloads, each on a vLLM started for it."""
    runs = []
    for k in range(2, n + 2):
        print(f"real run {k}: starting a fresh vLLM-CPU", flush=True)
        with real_server(work / f"vllm-{k}.log") as server:
            base = server.base_url  # type: ignore[attr-defined]
            runs.append(run_legs(base, work, f"real-{k}", duration_s=duration_s))
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
