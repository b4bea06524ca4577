"""The gateway's CPU instructions per request, counted by callgrind: a figure that holds on
a shared machine, where CPU seconds per request do not.

`bench_gateway.py`'s CPU per request moves with the machine's load: the busier the
cores, the more tokens each backend read carries and the fewer reads (and writes) a
request takes, so two runs of the same code differ by more than a fifth. Here each
gateway runs under `valgrind --tool=callgrind` (user-space instructions, the same on
every run to within 1 %) behind one emulator run natively; the load is fixed: N
streamed completions (32-token prompt, 64 tokens, the bench's body) from C closed-loop
streams. Two regimes:

- `--step-ms 20` (default): the emulator paces every step, so each token is its own
  backend read and client write (the gateway, slowed ~50x, still keeps up): the per-read
  relay path counts 64 times per request.
- `--step-ms 0`: the instant emulator; the slowed gateway gets each answer in a few large
  reads, so the per-request path (parse, admission, routing, log line) dominates.

The gateway's background (its 50 ms tick, scrapes and probes) is measured over an idle
window of the same length after the load and taken out. Compare versions side by side
with `--gateway NAME=SRC` (a source tree put first on PYTHONPATH, e.g. a checkout of an
older commit); the first is the reference of the ratios.

Run: .venv/bin/python benchmarks/bench_gateway_instructions.py
     [--gateway before=/path/to/old/src --gateway now=src] [--requests 64]
     [--concurrency 8] [--step-ms 20]
Needs valgrind (Debian: apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from bench_gateway import MODEL, body, engine_profile, gateway_config, one_request

from burstguard.procs import ManagedProcess, free_port

SRC = Path(__file__).resolve().parent.parent / "src"
WARMUP_REQUESTS = 8  # before counting: connections opened, first-use paths taken
DUMP_WAIT_S = 30.0


def totals(path: Path) -> int:
    """Instructions in one callgrind dump."""
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"{path}: no totals line")


def dump(pid: int, out_dir: Path) -> int:
    """Instructions since the last dump (callgrind zeroes its counters at each)."""
    before = set(out_dir.glob("cg.*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    deadline = time.monotonic() + DUMP_WAIT_S
    while time.monotonic() < deadline:
        new = set(out_dir.glob("cg.*")) - before
        if new:
            time.sleep(0.3)  # written whole
            return totals(new.pop())
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump within {DUMP_WAIT_S:g} s")


async def load(url: str, requests: int, concurrency: int) -> int:
    """`requests` streamed completions from `concurrency` closed-loop streams; all must
    complete with their 64 tokens."""
    payload = body(64)
    left = requests

    async def stream() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            s = await one_request(session, url + "/v1/completions", payload)
            if s is None or s.tokens != 64:
                raise RuntimeError(f"a request failed or came back short: {s}")

    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(stream() for _ in range(concurrency)))
    return requests


def measure(
    name: str, src: str, backend: str, args: argparse.Namespace, tmp: Path
) -> tuple[float, float]:
    """(instructions per request, background instructions per second) of one gateway."""
    port = free_port()
    out_dir = tmp / name
    out_dir.mkdir()
    cfg = out_dir / "gateway.yaml"
    gateway_config(cfg, port, backend, args.concurrency, log=True)
    gateway = ManagedProcess(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         f"--callgrind-out-file={out_dir}/cg.%p", sys.executable, "-m", "burstguard.cli",
         "gateway", "--config", str(cfg)],
        f"http://127.0.0.1:{port}/health", env={"PYTHONPATH": src},
        log_path=out_dir / "gateway.log", startup_timeout_s=300,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with gateway:
        assert gateway.proc is not None
        pid = gateway.proc.pid
        asyncio.run(load(url, WARMUP_REQUESTS, min(4, args.concurrency)))
        subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True,
                       capture_output=True)  # fmt: skip
        time.sleep(1.0)
        dump(pid, out_dir)  # from here on
        start = time.perf_counter()
        n = asyncio.run(load(url, args.requests, args.concurrency))
        wall = time.perf_counter() - start
        busy = dump(pid, out_dir)
        idle_start = time.perf_counter()
        time.sleep(wall)
        idle_rate = dump(pid, out_dir) / (time.perf_counter() - idle_start)
    per_request = (busy - idle_rate * wall) / n
    print(f"  {name}: {n} requests in {wall:.1f} s under callgrind; "
          f"{per_request / 1e6:.3f} M instructions per request "
          f"(background {idle_rate / 1e6:.2f} M/s taken out)", flush=True)  # fmt: skip
    return per_request, idle_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", action="append", default=[], metavar="NAME=SRC",
                        help="a gateway version: its name and source tree (repeatable; "
                        f"default: this tree, {SRC})")  # fmt: skip
    parser.add_argument("--requests", type=int, default=64, help="counted, per gateway")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop streams")
    parser.add_argument("--step-ms", type=float, default=20.0,
                        help="emulator time per step (0: instant, reads coalesce)")  # fmt: skip
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1 or args.step_ms < 0:
        parser.error("--requests and --concurrency must be positive, --step-ms >= 0")
    versions = []
    for item in args.gateway or [f"this={SRC}"]:
        name, sep, src = item.partition("=")
        if not sep or not name or not Path(src, "burstguard").is_dir():
            parser.error(f"--gateway {item!r}: expected NAME=SRC, SRC holding burstguard/")
        versions.append((name, str(Path(src).resolve())))
    if len({n for n, _ in versions}) < len(versions):
        parser.error("--gateway: each version needs its own name")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: install valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        e_port = free_port()
        profile = engine_profile(tmp / "profile.yaml", args.step_ms)
        emulator = ManagedProcess(
            [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", profile,
             "--port", str(e_port), "--served-model-name", MODEL, "--max-num-seqs", "512"],
            f"http://127.0.0.1:{e_port}/health", env={"PYTHONPATH": str(SRC)},
        )  # fmt: skip
        pacing = f"every step {args.step_ms:g} ms" if args.step_ms else "instant"
        print(f"{args.requests} streamed requests (64 tokens each) per gateway from "
              f"{args.concurrency} streams; emulator {pacing}, run natively")  # fmt: skip
        results = []
        with emulator:
            for name, src in versions:
                per, _ = measure(name, src, f"http://127.0.0.1:{e_port}", args, tmp)
                results.append((name, src, per))
    ref = results[0][2]
    print(f"\n{'gateway':<12}{'M instr/request':>16}{'vs ' + results[0][0]:>12}  source")
    for name, src, per in results:
        print(f"{name:<12}{per / 1e6:>16.3f}{per / ref:>12.1%}  {src}")


if __name__ == "__main__":
    main()
