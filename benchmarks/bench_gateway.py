"""The gateway's own cost: added TTFT and token throughput vs talking to the engine directly.

One emulator that answers instantly (`--profile instant`: zero step time, so the engine is
never what is measured), one `burstguard gateway` in front of it with caps far above the
load (nothing is queued: the figures are proxy overhead, not queueing), and one client,
this process (aiohttp on uvloop), that holds N closed-loop streaming completions open
(each: a 32-token prompt, 64 output tokens, ignore_eos, streamed, back to back unless
--think-s). The same client alternates between the two targets, direct and through the
gateway, in short phases (D G, G D, ...), so drift in the machine hits both alike.

Per target: TTFT p50/p99 (request sent -> first SSE bytes), output tokens/s of requests
that finished inside the measured window, socket reads per request (the gateway forwards
whatever its upstream read returned, so it can hand the client fewer, larger chunks than
the emulator writes); the gateway's added TTFT (its percentile minus the direct one) and
its throughput as a share of direct. A short sequential probe (one stream at a time)
first gives the per-request cost of the extra hop with no contention, and the gateway's CPU
per request (its /proc CPU time over the probe; on a shared 2-core VM it varies +-15%
between runs, so a change smaller than that needs an instruction count:
`bench_gateway_instructions.py`, the gateway under callgrind). Per phase it reads
each process's CPU seconds (/proc/PID/stat; the client's own process time) and the
machine's (/proc/stat): a process near 1.0 core is CPU-bound (each is one asyncio
thread); "other" is CPU used by processes outside the benchmark, which contends the run.
The gateway's own figure, burstguard_first_token_own_seconds (request read to upstream
write, less queue wait, plus the backend's head read to its write to the client), is read
from its /metrics around its phases: what the gateway itself adds to TTFT, apart from the
time its loop waited for a core the emulator and client also want.

With --step-ms S the emulator takes S ms for every step whatever the batch (a fitted
profile with only the step constant): 256 streams then get a token every S ms, as from a
real engine, instead of as fast as the CPUs allow, so on a small machine the three
processes are not CPU-bound and the comparison is of the same paced load. Each stream
waits U(0, S) before its next request, so arrivals fall at random phases of the step
clock, alike for both targets; the steps themselves cost both the same.

With --pin the gateway gets a core of its own and the emulator and the client share the
others (os.sched_setaffinity), as in a deployment where the gateway runs on its own CPUs:
then what is measured is the gateway's own added latency, not three processes queueing for
two cores. --flush-ms sets the gateway's stream_flush_ms (how often a stream's later chunks
are written; 0: every backend read at once).

Run: .venv/bin/python benchmarks/bench_gateway.py [--concurrency 256] [--phase-seconds 5]
     [--rounds 2] [--output-tokens 64] [--think-s 0] [--probe 200] [--no-gateway-log]
     [--pin] [--flush-ms 10] [--step-ms 0] [--peer vllm-router [--vllm-router PATH]]

--peer vllm-router adds the Rust router (PyPI; installed into its own venv under the
burstguard cache unless --vllm-router names an executable) as a third target in the same
run, the phases rotating over direct, gateway and it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from burstguard.core.engine.profile import PROFILES_DIR
from burstguard.paths import CACHE_ROOT
from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import parse_metrics

MODEL = "bench"
PROMPT_TOKENS = 32
WARMUP_S = 1.0  # of each phase, not measured (connections open, loops settle)
STEAL_WARN_CORES = 0.1  # stolen CPU in a phase above which the comparison is not trusted
DRAIN_S = 30.0  # longest wait for a phase's last requests
_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_TICK = os.sysconf("SC_CLK_TCK")
GOAL_P50_MS, GOAL_P99_MS, GOAL_RATIO = 1.0, 5.0, 0.95


@dataclass(slots=True)
class Sample:
    """One request: when it was sent, its TTFT, when it ended, its tokens, the reads it took."""

    sent: float
    ttft: float
    ended: float
    tokens: int
    reads: int


@dataclass
class Phase:
    """One target for one phase: its samples, window and the CPU each process used."""

    target: str
    start: float
    end: float
    warmup: float
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def measured(self) -> list[Sample]:
        """Requests sent after the warm-up; the throughput counts those ended in the window."""
        return [s for s in self.samples if s.sent >= self.start + self.warmup]

    def tokens_per_s(self) -> float:
        lo = self.start + self.warmup
        done = sum(s.tokens for s in self.samples if lo <= s.ended <= self.end)
        return done / (self.end - lo)


def warmup_s(args: argparse.Namespace) -> float:
    """Unmeasured start of a phase: WARMUP_S, and at least two requests' worth of steps, so
    that the streams, which all start together, have spread over the step clock."""
    return max(WARMUP_S, 2 * args.output_tokens * args.step_ms / 1e3)


def engine_profile(path: Path, step_ms: float) -> str:
    """The instant profile, or a copy of it whose every step takes step_ms whatever the batch."""
    if step_ms <= 0:
        return "instant"
    doc = yaml.safe_load((PROFILES_DIR / "instant.yaml").read_text(encoding="utf-8"))
    doc["name"] = f"instant-step-{step_ms:g}ms"
    doc["description"] = "The instant profile with a fixed time per step: it paces, never queues."
    doc["fitted"]["c0_s"] = step_ms / 1e3
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of the whole machine so far, all cores (Linux /proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = f
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; NaN for no data."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    i = int(k)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (k - i)


def body(output_tokens: int) -> dict[str, object]:
    prompt = "tok " * PROMPT_TOKENS  # 4 characters = one token in the emulator's count
    return {"model": MODEL, "prompt": prompt, "max_tokens": output_tokens,
            "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip


async def one_request(
    session: aiohttp.ClientSession, url: str, payload: dict[str, object]
) -> Sample | None:
    """Streams one completion; None if it failed (non-200 or transport error)."""
    sent = time.perf_counter()
    ttft = -1.0
    tail = b""
    reads = 0
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                await resp.read()
                return None
            async for chunk in resp.content.iter_any():
                if ttft < 0:
                    ttft = time.perf_counter() - sent
                reads += 1
                tail = (tail + chunk)[-512:]
    except (aiohttp.ClientError, TimeoutError):
        return None
    found = _USAGE.findall(tail)
    return Sample(sent, ttft, time.perf_counter(), int(found[-1]) if found else 0, reads)


async def run_phase(
    target: str, base: str, args: argparse.Namespace, payload: dict[str, object],
    pids: dict[str, int],
) -> Phase:  # fmt: skip
    """`args.concurrency` closed-loop streams against `base` for WARMUP_S + phase seconds."""
    concurrency, seconds, think = args.concurrency, args.phase_seconds, args.think_s
    step = args.step_ms / 1e3
    rng = random.Random(0)
    url = base + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=DRAIN_S)
    before = {name: proc_cpu(pid) for name, pid in pids.items()}
    client0 = time.process_time()
    busy0, steal0 = machine_cpu()
    warmup, start = warmup_s(args), time.perf_counter()
    phase = Phase(target, start, start + warmup + seconds, warmup)

    async def user(k: int) -> None:
        await asyncio.sleep(k * 0.2 / concurrency)  # spread connection opening over 0.2 s
        while time.perf_counter() < phase.end:
            s = await one_request(session, url, payload)
            if s is None:
                phase.errors += 1
            else:
                phase.samples.append(s)
            pause = think + rng.uniform(0.0, step)  # a random phase against the step clock
            if pause > 0:
                await asyncio.sleep(pause)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(user(k) for k in range(concurrency)))
    wall = phase.wall = time.perf_counter() - start
    phase.cpu = {name: (proc_cpu(pid) - before[name]) / wall for name, pid in pids.items()}
    phase.cpu["client"] = (time.process_time() - client0) / wall
    busy, steal = machine_cpu()
    ours = sum(phase.cpu.values())
    phase.cpu["other"] = max(0.0, (busy - busy0) / wall - ours)  # processes not ours
    phase.cpu["steal"] = (steal - steal0) / wall  # taken by the hypervisor
    return phase


async def probe(base: str, n: int, payload: dict[str, object]) -> list[float]:
    """TTFT of `n` requests sent one at a time (the first 10 are warm-up)."""
    url = base + "/v1/completions"
    out: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DRAIN_S)) as session:
        for i in range(n + 10):
            s = await one_request(session, url, payload)
            if s is not None and i >= 10:
                out.append(s.ttft)
    return out


LAG = "burstguard_event_loop_lag_seconds"
OWN = "burstguard_first_token_own_seconds"


async def gateway_histograms(base: str) -> dict[str, float]:
    """The gateway's loop-lag and own-time histograms, as parsed samples (cumulative)."""
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as resp:
        return parse_metrics(await resp.text(), only=(LAG, OWN))


def added(into: dict[str, float], before: dict[str, float], after: dict[str, float]) -> None:
    """Adds what each sample grew by between two scrapes to `into` (phases summed)."""
    for key, n in after.items():
        into[key] = into.get(key, 0.0) + n - before.get(key, 0.0)


def buckets(samples: dict[str, float], name: str) -> dict[float, float]:
    """{upper bound: cumulative count} of histogram `name` (keys: name_bucket{le="0.001"})."""
    prefix = name + "_bucket"
    return {float(k.split('"')[1]): n for k, n in samples.items() if k.startswith(prefix)}


def bucket_pct(cum: dict[float, float], q: float) -> float:
    """The upper bound of the bucket that holds quantile q (a bound, not an estimate)."""
    total = cum.get(float("inf"), 0.0)
    return next(le for le, n in sorted(cum.items()) if n >= q * total)


def print_lag(samples: dict[str, float]) -> None:
    """Where the gateway's 50 ms tick ran late during its phases (cumulative buckets)."""
    lag = buckets(samples, LAG)
    total = lag.get(float("inf"), 0.0)
    if not total:
        return
    shares = ", ".join(f"<= {le * 1e3:g} ms {n / total:.0%}" for le, n in sorted(lag.items())
                       if le in (0.001, 0.002, 0.005, 0.01, 0.025))  # fmt: skip
    print(f"  gateway event-loop lag in its phases ({total:.0f} ticks): {shares}")


def own_time(samples: dict[str, float]) -> str:
    """The gateway's own share of the first-token path, as it measured it."""
    n = samples.get(OWN + "_count", 0.0)
    if not n:
        return "not measured (an older gateway)"
    cum = buckets(samples, OWN)
    return (f"mean {samples[OWN + '_sum'] / n * 1e3:.2f} ms, p50 <= "
            f"{bucket_pct(cum, .5) * 1e3:g} ms, p99 <= {bucket_pct(cum, .99) * 1e3:g} ms "
            f"({n:.0f} streams)")  # fmt: skip


def gateway_config(
    path: Path, port: int, backend: str, concurrency: int, log: bool, flush_ms: float = 10.0
) -> None:
    """Caps well above the load and no adaptation: nothing waits in the gateway's queue."""
    cap = 4 * concurrency
    cfg = {
        "listen": {"host": "127.0.0.1", "port": port},
        "backends": [{"url": backend}],
        "log_requests": log,
        "stream_flush_ms": flush_ms,
        "admission": {"max_in_flight": cap, "adapt": False, "max_queue_requests": cap},
    }
    path.write_text(yaml.safe_dump(cfg))


def ms(x: float) -> str:
    return f"{x * 1e3:7.2f}"


async def bench(
    args: argparse.Namespace, direct: str, proxies: dict[str, str], pids: dict[str, int]
) -> None:  # fmt: skip
    """Probes each proxy against direct, then the closed-loop phases, every target in turn."""
    payload = body(args.output_tokens)
    via = proxies["gateway"]
    if args.probe:
        await probes(args, direct, proxies, pids, payload)
    phases: list[Phase] = []
    hist: dict[str, float] = {}  # the gateway's own histograms over its phases
    cores = " ".join(n for n in pids)
    print(f"{'phase':<7}{'target':<13}{'reqs':>7}{'err':>5}{'tok/s':>9}{'reads/req':>10}"
          f"{'p50 ms':>9}{'p99 ms':>9}   CPU cores: {cores} client other steal")  # fmt: skip
    for r in range(args.rounds):
        order = [("direct", direct), *proxies.items()]
        if r % 2:
            order.reverse()
        for name, base in order:
            h0 = await gateway_histograms(via) if name == "gateway" else {}
            p = await run_phase(name, base, args, payload, pids)
            if name == "gateway":
                added(hist, h0, await gateway_histograms(via))
            phases.append(p)
            m = p.measured()
            t = [s.ttft for s in m]
            reads = statistics.fmean(s.reads for s in m) if m else float("nan")
            used = " ".join(f"{p.cpu[n]:.2f}" for n in (*pids, "client", "other", "steal"))
            print(f"{r + 1:<7}{name:<13}{len(t):>7}{p.errors:>5}{p.tokens_per_s():>9,.0f}"
                  f"{reads:>10.1f}{ms(pct(t, .5)):>9}{ms(pct(t, .99)):>9}   {used}",
                  flush=True)  # fmt: skip
    summarize(args, phases, list(proxies))
    print(f"  gateway's own time on the first-token path in its phases: {own_time(hist)}")
    print_lag(hist)


async def probes(
    args: argparse.Namespace, direct: str, proxies: dict[str, str], pids: dict[str, int],
    payload: dict[str, object],
) -> None:  # fmt: skip
    """One request at a time, direct then through each proxy: the extra hop's TTFT with no
    contention, and each proxy's CPU per request (less its idle background: the
    gateway's backend scrape every 250 ms and 50 ms tick, measured over the direct probe)."""
    cpu0, t0 = {n: proc_cpu(pids[n]) for n in proxies}, time.perf_counter()
    d = await probe(direct, args.probe, payload)
    cpu1, t1 = {n: proc_cpu(pids[n]) for n in proxies}, time.perf_counter()
    for name, base in proxies.items():
        h0 = await gateway_histograms(base) if name == "gateway" else {}
        c0, s0 = proc_cpu(pids[name]), time.perf_counter()
        g = await probe(base, args.probe, payload)
        c1, s1 = proc_cpu(pids[name]), time.perf_counter()
        idle = (cpu1[name] - cpu0[name]) / (t1 - t0)
        per_req = max(0.0, c1 - c0 - idle * (s1 - s0)) / (args.probe + 10)
        print(f"sequential probe ({args.probe} requests, one at a time), {name}: TTFT p50 "
              f"direct {ms(pct(d, .5))} ms, {name} {ms(pct(g, .5))} ms, added "
              f"{ms(pct(g, .5) - pct(d, .5))} ms; p99 added {ms(pct(g, .99) - pct(d, .99))} "
              f"ms; {name} CPU {per_req * 1e3:.2f} ms per request (less its idle "
              "background)")  # fmt: skip
        if name == "gateway":
            probed: dict[str, float] = {}
            added(probed, h0, await gateway_histograms(base))
            print(f"  gateway's own time on the first-token path in the probe: "
                  f"{own_time(probed)}")  # fmt: skip


def print_noise(phases: list[Phase], by: dict[str, list[Phase]]) -> None:
    """How far the run can resolve a difference: the spread of one target's p50 between its
    own phases, and time the hypervisor took (steal), which no phase order cancels."""
    spread = {k: [pct([s.ttft for s in p.measured()], 0.5) for p in v] for k, v in by.items()}
    if all(len(v) > 1 for v in spread.values()):
        each = ", ".join(f"{k} {(max(v) - min(v)) * 1e3:.2f} ms" for k, v in spread.items())
        print(f"  noise: p50 spread between phases of one target: {each}; a smaller "
              "difference is not resolved")  # fmt: skip
    steal = max(p.cpu["steal"] for p in phases)
    if steal >= STEAL_WARN_CORES:
        print(f"  WARNING: the hypervisor took up to {steal:.2f} cores in a phase (steal): "
              "the machine is contended from outside, the verdicts above are unreliable; "
              "rerun when steal is ~0")  # fmt: skip


def summarize(args: argparse.Namespace, phases: list[Phase], proxies: list[str]) -> None:
    by: dict[str, list[Phase]] = {"direct": [], **{n: [] for n in proxies}}
    for p in phases:
        by[p.target].append(p)
    ttft = {k: [s.ttft for p in v for s in p.measured()] for k, v in by.items()}
    rate = {k: statistics.fmean(p.tokens_per_s() for p in v) for k, v in by.items()}
    p50 = {k: pct(v, 0.5) for k, v in ttft.items()}
    p99 = {k: pct(v, 0.99) for k, v in ttft.items()}
    errors = sum(p.errors for p in phases)
    print(f"\n{args.concurrency} concurrent streams, {args.output_tokens} output tokens each, "
          f"engine step {args.step_ms:g} ms, think time {args.think_s:g} s + U(0, step), "
          f"{args.rounds} x {args.phase_seconds:g} s measured per target, {os.cpu_count()} "
          f"CPU cores, {'gateway pinned alone' if args.pin else 'shared by all'}; "
          f"stream_flush_ms {args.flush_ms:g}; {errors} errors")  # fmt: skip
    print(f"  {'target':<12} {'TTFT p50':>9} {'p99':>9} {'added p50':>10} {'added p99':>10} "
          f"{'tok/s':>9} {'of direct':>9} {'CPU/request':>12}")  # fmt: skip
    for k, v in by.items():
        own = sum(p.cpu[k] * p.wall for p in v) if k in proxies else 0.0
        reqs = sum(len(p.samples) for p in v)
        cpu = f"{own / reqs * 1e3:9.2f} ms" if k in proxies and reqs else f"{'-':>12}"
        print(f"  {k:<12} {ms(p50[k])} ms {ms(p99[k])} ms {ms(p50[k] - p50['direct'])} ms "
              f"{ms(p99[k] - p99['direct'])} ms {rate[k]:9,.0f} {rate[k] / rate['direct']:9.1%} "
              f"{cpu}")  # fmt: skip
    add50, add99 = p50["gateway"] - p50["direct"], p99["gateway"] - p99["direct"]
    ratio = rate["gateway"] / rate["direct"]
    ok50, ok99, okr = add50 <= GOAL_P50_MS / 1e3, add99 <= GOAL_P99_MS / 1e3, ratio >= GOAL_RATIO
    print(f"  gateway: added TTFT p50 {ms(add50)} ms (goal <= {GOAL_P50_MS:g}: "
          f"{'met' if ok50 else 'NOT met'}), p99 {ms(add99)} ms (goal <= {GOAL_P99_MS:g}: "
          f"{'met' if ok99 else 'NOT met'}), throughput {ratio:.1%} of direct (goal >= "
          f"{GOAL_RATIO:.0%}: {'met' if okr else 'NOT met'})")  # fmt: skip
    for peer in (n for n in proxies if n != "gateway"):
        verdict = "met" if p50["gateway"] <= p50[peer] else "NOT met"
        print(f"  gateway's added TTFT p50 no worse than {peer}'s: {verdict} "
              f"({ms(add50)} vs {ms(p50[peer] - p50['direct'])} ms)")  # fmt: skip
    print_noise(phases, by)
    for k, v in by.items():
        c = {n: statistics.fmean(p.cpu[n] for p in v) for n in v[0].cpu}
        mine = [n for n in c if n not in ("other", "steal")]
        busy = ", ".join(n for n in mine if c[n] >= 0.9) or "none"
        print(f"  CPU in the {k} phases: {sum(c[n] for n in mine):.2f} cores ours, "
              f"{c['other']:.2f} other processes, {c['steal']:.2f} stolen, of "
              f"{os.cpu_count()}; CPU-bound (>= 0.9 core): {busy}")  # fmt: skip
    if max(p.cpu["other"] for p in phases) > 0.2:
        print("  WARNING: other processes used CPU during the run; the figures are contended")


def pin(pids: dict[str, int], proxies: list[str]) -> str:
    """The proxies alone on the last core (one runs at a time); the emulator and this
    client on the others."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit("--pin needs at least 2 cores")
    rest, own = set(cores[:-1]), {cores[-1]}
    for name in proxies:
        os.sched_setaffinity(pids[name], own)
    os.sched_setaffinity(pids["emulator"], rest)
    os.sched_setaffinity(0, rest)
    return f"pinned: proxies on core {cores[-1]}, emulator and client on {sorted(rest)}"


def pid_of(proc: ManagedProcess) -> int:
    assert proc.proc is not None, "started"
    return proc.proc.pid


PEER_VENV = CACHE_ROOT / "peers" / "vllm-router"


def vllm_router_exe(given: str | None) -> Path:
    """`vllm-router` (the Rust router on PyPI): the given executable, else one installed by
    this benchmark into a venv of its own (never a burstguard dependency)."""
    if given:
        return Path(given)
    exe = PEER_VENV / "bin" / "vllm-router"
    if not exe.exists():
        print(f"installing vllm-router (PyPI) into {PEER_VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(PEER_VENV / "bin" / "pip"), "install", "--quiet", "vllm-router"],
                       check=True)  # fmt: skip
    return exe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=256, help="open streams")
    parser.add_argument("--phase-seconds", type=float, default=5.0, help="measured s per phase")
    parser.add_argument("--rounds", type=int, default=2, help="direct+gateway phase pairs")
    parser.add_argument("--output-tokens", type=int, default=64, help="per request")
    parser.add_argument("--think-s", type=float, default=0.0,
                        help="pause between a stream's requests (0: back to back)")  # fmt: skip
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="the engine's time per step whatever the batch, e.g. 20 (default "
                        "0: the instant profile, streams as fast as the CPUs allow)")  # fmt: skip
    parser.add_argument("--probe", type=int, default=200,
                        help="sequential requests per target, one at a time (0: skip)")  # fmt: skip
    parser.add_argument("--no-gateway-log", action="store_true",
                        help="turn off the gateway's per-request JSON log line")  # fmt: skip
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the gateway on a core of its own, emulator and client on the rest",
    )
    parser.add_argument(
        "--flush-ms",
        type=float,
        default=10.0,
        help="the gateway's stream_flush_ms (0: write every read at once)",
    )
    parser.add_argument("--peer", choices=["vllm-router"], action="append", default=[],
                        help="also measure this proxy in the same run (installed into its "
                        "own venv unless --vllm-router)")  # fmt: skip
    parser.add_argument("--vllm-router", help="a vllm-router executable to use")
    args = parser.parse_args()
    if args.concurrency < 1 or args.rounds < 1 or args.phase_seconds <= 0:
        parser.error("--concurrency, --rounds and --phase-seconds must be positive")
    if args.step_ms < 0 or args.think_s < 0:
        parser.error("--step-ms and --think-s must be >= 0")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    e_port, g_port = free_port(), free_port()
    direct, via = f"http://127.0.0.1:{e_port}", f"http://127.0.0.1:{g_port}"
    seqs = max(256, 2 * args.concurrency)
    budget = max(8192, args.concurrency * (PROMPT_TOKENS + 1))
    with tempfile.TemporaryDirectory() as tmp:
        profile = engine_profile(Path(tmp) / "profile.yaml", args.step_ms)
        emulator = ManagedProcess(
            [sys.executable, "-m", "burstguard.cli", "emulate", "--profile", profile,
             "--port", str(e_port), "--served-model-name", MODEL, "--max-num-seqs", str(seqs),
             "--max-num-batched-tokens", str(budget)],
            f"{direct}/health",
        )  # fmt: skip
        cfg = Path(tmp) / "gateway.yaml"
        gateway_config(cfg, g_port, direct, args.concurrency, not args.no_gateway_log,
                       args.flush_ms)  # fmt: skip
        gateway = ManagedProcess(
            [sys.executable, "-m", "burstguard.cli", "gateway", "--config", str(cfg)],
            f"{via}/health", log_path=Path(tmp) / "gateway.log",
        )  # fmt: skip
        if args.no_gateway_log:
            gateway.log_path = None
        peers = []
        if "vllm-router" in args.peer:
            r_port = free_port()
            peers.append(("vllm-router", f"http://127.0.0.1:{r_port}", ManagedProcess(
                [str(vllm_router_exe(args.vllm_router)), "--host", "127.0.0.1", "--port",
                 str(r_port), "--policy", "round_robin", "--worker-urls", direct],
                f"http://127.0.0.1:{r_port}/health", log_path=Path(tmp) / "vllm-router.log",
                startup_timeout_s=60.0,
            )))  # fmt: skip
        with contextlib.ExitStack() as stack:
            for proc in (emulator, gateway, *(peer[2] for peer in peers)):
                stack.enter_context(proc)
            pids = {"emulator": pid_of(emulator), "gateway": pid_of(gateway)}
            pids |= {name: pid_of(proc) for name, _, proc in peers}
            proxies = {"gateway": via, **{name: url for name, url, _ in peers}}
            placement = pin(pids, list(proxies)) if args.pin else "cores shared by all"
            engine = (f"every step {args.step_ms:g} ms" if args.step_ms > 0
                      else "instant profile, zero step time")  # fmt: skip
            print(f"emulator ({engine}, max-num-seqs {seqs}) on {direct}; gateway on "
                  f"{via} (max_in_flight {4 * args.concurrency}, no adaptation, request log "
                  f"{'off' if args.no_gateway_log else 'on'}, stream_flush_ms "
                  f"{args.flush_ms:g}); {', '.join(f'{n} on {u}' for n, u, _ in peers)}; "
                  f"{placement}")  # fmt: skip
            asyncio.run(bench(args, direct, proxies, pids))


if __name__ == "__main__":
    main()
