"""Live routing comparison: four emulators of two speeds (2 x llama3-8b-h100,
2 x llama3-8b-a100, the same --max-num-seqs) behind one router, a bursty open loop at 75 %
of their summed capacity, streamed; each router on the same workload, one after another,
in --repeats interleaved rounds (the host's noise is larger than the policies' differences).

Routers: `burstguard gateway` with its score router, round robin and least request (one
queue in the gateway, per-backend caps = --max-num-seqs + --cap-extra), and `vllm-router`
(the Rust router on PyPI, installed in its own venv: `python -m venv /tmp/vr-venv &&
/tmp/vr-venv/bin/pip install vllm-router`; never a burstguard dependency) in its default
policy (cache_aware), power_of_two (its load-aware policy) and round_robin.

First each emulator's capacity alone (a closed loop of 2 x --max-num-seqs users); then a
saturation leg through the gateway (the same closed loop over all four); both count the
tokens streamed in the loop's steady window (its last three quarters: no ramp, no drain):
total output tok/s through the gateway vs the sum of the four alone. Then the open-loop
legs. Times are engine seconds (wall x --speedup). Prints a Markdown table of medians.

Run: .venv/bin/python benchmarks/bench_router.py [--duration-s 30] [--repeats 3]
       [--max-num-seqs 8] [--cap-extra 0] [--vllm-router /tmp/vr-venv/bin/vllm-router]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from burstguard.bench.leg import run_bench
from burstguard.bench.runner import BenchConfig
from burstguard.procs import ManagedProcess, free_port
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize

BURSTGUARD = [sys.executable, "-m", "burstguard.cli"]
PROFILES = ("llama3-8b-h100", "llama3-8b-h100", "llama3-8b-a100", "llama3-8b-a100")
MODEL = "m"
PROMPT = "lognormal:mean=512,sigma=0.5"
OUTPUT = "lognormal:mean=128,sigma=0.5"


def _proc(argv: list[str], port: int, log: Path, health: str = "/health") -> ManagedProcess:
    proc = ManagedProcess(argv, f"http://127.0.0.1:{port}{health}", log_path=log)
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


def emulator(work: Path, profile: str, seqs: int, speedup: float) -> ManagedProcess:
    port = free_port()
    argv = [*BURSTGUARD, "emulate", "--profile", profile, "--host", "127.0.0.1",
            "--port", str(port), "--speedup", str(speedup), "--max-num-seqs", str(seqs),
            "--served-model-name", MODEL]  # fmt: skip
    return _proc(argv, port, work / f"emulator-{port}.log")


def gateway(work: Path, urls: list[str], policy: str, cap: int, speedup: float) -> ManagedProcess:
    port = free_port()
    config = {
        "engine_speedup": speedup,
        "log_requests": False,
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 600.0}],
        "admission": {"max_in_flight": len(urls) * cap, "max_in_flight_per_backend": cap},
        "fleet": {"router": {"policy": policy}},
    }
    path = work / f"gateway-{policy}.yaml"
    path.write_text(yaml.safe_dump(config))
    flags = [x for u in urls for x in ("--backend", u)]
    argv = [*BURSTGUARD, "gateway", "--config", str(path), "--port", str(port), *flags]
    return _proc(argv, port, work / f"gateway-{policy}.log")


def vllm_router(work: Path, exe: str, urls: list[str], policy: str) -> ManagedProcess:
    port = free_port()
    argv = [exe, "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
            "--worker-urls", *urls]  # fmt: skip
    proc = _proc(argv, port, work / f"vllm-router-{policy}.log")
    proc.startup_timeout_s = 60.0
    return proc


def leg(
    work: Path, label: str, target: str, wl: Workload, speedup: float, users: int | None = None,
    duration_s: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    cfg = BenchConfig(target=target, model=MODEL, out_dir=work / label, api="completions",
                      speedup=speedup, concurrency=users, duration_s=duration_s, label=label,
                      timeout_s=300.0)  # fmt: skip
    return run_bench(cfg, wl, None)


def steady_tokens_per_s(records_path: Path, start_s: float, end_s: float) -> float:
    """Output tokens streamed per second within [start_s, end_s] of a closed-loop leg (its
    times), each token at its arrival: the capacity without the loop's ramp and drain."""
    tokens = 0
    for line in records_path.read_text().splitlines():
        r = json.loads(line)
        if r.get("ttft_s") is None or r.get("sent_s") is None:
            continue
        first = r["sent_s"] + r["ttft_s"]
        arrivals = itertools.accumulate(r.get("itl_s") or [], initial=first)
        tokens += sum(start_s <= a <= end_s for a in arrivals)
    return tokens / (end_s - start_s)


def capacity(work: Path, label: str, target: str, wl: Workload, speedup: float, users: int,
             engine_s: float) -> float:  # fmt: skip
    """Output tok/s of a closed loop of `users` for `engine_s`, over its last three quarters."""
    leg(work, label, target, wl, speedup, users, engine_s)
    return steady_tokens_per_s(work / label / "records.jsonl", 0.25 * engine_s, engine_s)


@contextlib.contextmanager
def running(proc: ManagedProcess) -> Iterator[str]:
    with proc:
        yield proc.base_url  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=30.0, help="wall seconds per leg")
    ap.add_argument("--load", type=float, default=0.75, help="share of summed capacity")
    ap.add_argument(
        "--cap-extra",
        type=int,
        default=0,
        help="gateway cap per backend = --max-num-seqs + this (> 0: ready requests wait "
        "in each engine's queue instead of the gateway's)",
    )
    ap.add_argument(
        "--policies",
        default="score,round_robin,least_request",
        help="burstguard router policies to run (comma-separated)",
    )
    ap.add_argument("--vllm-router", default="/tmp/vr-venv/bin/vllm-router")
    ap.add_argument("--vllm-router-policies", default="cache_aware,power_of_two,round_robin")
    ap.add_argument("--no-saturation", action="store_true", help="skip the saturated leg")
    ap.add_argument("--repeats", type=int, default=1, help="rounds over all routers")
    args = ap.parse_args()  # fmt: skip
    s, seqs = args.speedup, args.max_num_seqs
    cap = seqs + args.cap_extra
    engine_s = args.duration_s * s  # a leg's length in engine seconds
    sample = synthesize(PatternSpec(duration_s=engine_s, rate=200, seed=9,
                                    prompt_tokens=PROMPT, output_tokens=OUTPUT))  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="bench-router-"))
    procs = [emulator(work, p, seqs, s) for p in PROFILES]
    rows: dict[str, list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(running(p)) for p in procs]
        alone = []
        for p, u in zip(PROFILES, urls, strict=True):
            port = u.rsplit(":", 1)[1]
            alone.append(capacity(work, f"alone-{port}", u, sample, s, 2 * seqs, 0.4 * engine_s))
            print(f"capacity alone {p} {u}: {alone[-1]:.0f} output tok/s", flush=True)
        total = sum(alone)
        mean_out = float(sample.output_tokens.mean())
        rate = args.load * total / mean_out
        spec = PatternSpec(pattern="burst", duration_s=engine_s, rate=rate, seed=1,
                           prompt_tokens=PROMPT, output_tokens=OUTPUT)  # fmt: skip
        wl = synthesize(spec)
        print(f"sum of the four alone {total:.0f} tok/s; open loop: {len(wl)} requests, "
              f"bursty, {rate:.1f} req/s = {args.load:.0%} of it; gateway cap per backend "
              f"{cap}", flush=True)  # fmt: skip
        if not args.no_saturation:
            with running(gateway(work, urls, "score", cap, s)) as gw:
                users = 2 * len(urls) * seqs
                sat = capacity(work, "saturated-score", gw, sample, s, users, 0.4 * engine_s)
            print(f"saturated through the gateway (score, {users} users): {sat:.0f} tok/s = "
                  f"{sat / total:.1%} of the sum alone", flush=True)  # fmt: skip
        exe = shutil.which(args.vllm_router) or args.vllm_router
        routers = [("burstguard", p) for p in args.policies.split(",")]
        if Path(exe).exists():
            routers += [("vllm-router", p) for p in args.vllm_router_policies.split(",") if p]
        else:
            print(f"vllm-router not found at {exe}: skipped", flush=True)
        for rep in range(args.repeats):  # interleaved, so a slow spell of the host hits all
            for kind, policy in routers:
                proc = (gateway(work, urls, policy, cap, s) if kind == "burstguard"
                        else vllm_router(work, exe, urls, policy))  # fmt: skip
                with running(proc) as target:
                    r = leg(work, f"{kind}-{policy}-{rep}", target, wl, s)
                rows.setdefault(f"{kind} {policy}", []).append(r)
                print(f"round {rep + 1}/{args.repeats} done: {kind} {policy}: TTFT p95 "
                      f"{r['ttft_s']['p95'] * 1e3:.0f} ms", flush=True)  # fmt: skip
    print(f"\nMedians over {args.repeats} round(s); p95 of each round in brackets.\n")
    print("| router | completed | TTFT p50 | TTFT p95 | TTFT p99 | output tok/s | vs offered |")
    print("|---|---|---|---|---|---|---|")
    offered = rate * mean_out
    for name, rs in rows.items():

        def med(f: Callable[[dict[str, Any]], float], rs: list[dict[str, Any]] = rs) -> float:
            return float(np.median([f(r) for r in rs]))

        p95s = ", ".join(f"{r['ttft_s']['p95'] * 1e3:.0f}" for r in rs)
        done = sum(r["completed"] for r in rs), sum(r["requests"] for r in rs)
        tps = med(lambda r: r["output_tokens_per_s"])
        print(f"| {name} | {done[0]}/{done[1]} | {med(lambda r: r['ttft_s']['p50']) * 1e3:.0f} ms "
              f"| {med(lambda r: r['ttft_s']['p95']) * 1e3:.0f} ms ({p95s}) "
              f"| {med(lambda r: r['ttft_s']['p99']) * 1e3:.0f} ms | {tps:.0f} "
              f"| {tps / offered:.1%} |")  # fmt: skip
    print(f"\nlogs and records: {work}")


if __name__ == "__main__":
    main()
