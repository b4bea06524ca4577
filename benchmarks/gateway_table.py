"""The must-show table of docs/gateway.md: the demo's mixed workload through a gateway
config in virtual time, direct vs gateway, at 70% and 80% of capacity on seeds 0-4.

70% interactive chat (1024 prompt / 256 output tokens), 30% batch (uniform 512-1024
output tokens), the seed's burst pattern, llama3-8b-h100 with 48 slots. Per run:
interactive TTFT <= 1 s (shed = miss), output tokens/s over the run vs direct, batch
TTFT p95, the gateway's preemptions. The goal: >= 99% and >= 95% in every run.

`--engine vllm-cpu`: the mix of `make demo ENGINE=vllm-cpu` step 5 instead (60-token
prompts, interactive 32 output tokens, batch uniform 128-256, bursts of 4-8, the
packaged `smollm2-135m-cpu` profile with 8 slots, TTFT target 3 s) through
examples/gateway-demo-vllm-cpu.yaml.

`--live epp` / `--live gateway`: the same table measured, not simulated: an emulator
(the setup's profile and slots, at the config's `engine_speedup`) on 127.0.0.1, each
seed's workload sent by `burstguard bench` once to it directly and once through Envoy +
`burstguard epp` (bench_epp.py's Envoy: ext_proc FULL_DUPLEX_STREAMED to the picker,
ORIGINAL_DST on its pick; `make envoy`) or through `burstguard gateway`, both on the same
config file. A timing: run it alone (`flock /work/notes/bench.lock ...`).

Run: .venv/bin/python benchmarks/gateway_table.py [--engine vllm-cpu] [--config FILE]
     [--epp] [--live epp|gateway [--first-seed N]] [--retry exponential]

`--epp` (virtual time): the config as `burstguard epp` runs it, the prediction for
`--live epp`. Output tokens/s counts completed answers only: a request a preemption ended
(the picker's `epp.preempt: end`) counts none of the tokens it got; with `--retry
exponential` its client sends it again and the completed retry counts (live: bench's
clients; in virtual time: the simulator's, `sim --retry`).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from burstguard.client.retry import RetryPolicy
from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import PROFILES_DIR, Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import parse_metrics
from burstguard.sim.client_retries import ClientRetry
from burstguard.sim.compare import RunFigures, capacity, compare, figures
from burstguard.wire.records import read_records
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize
from burstguard.workload.traces import write_workload


@dataclass(frozen=True)
class Setup:
    """A demo engine's step 5 in virtual time: its mix, profile, slots, config, SLO."""

    mix: PatternSpec
    profile: str
    slots: int
    config: str
    ttft_s: float


SETUPS = {
    "emulator": Setup(
        PatternSpec(
            pattern="burst", duration_s=60.0, prompt_tokens="1024", output_tokens="256",
            classes="interactive=0.7,batch=0.3",
            class_output_tokens=(("batch", "uniform:512-1024"),),
        ),
        "llama3-8b-h100", 48, "examples/gateway-demo.yaml", 1.0,
    ),
    "vllm-cpu": Setup(
        PatternSpec(
            pattern="burst", duration_s=60.0, prompt_tokens="60", output_tokens="32",
            classes="interactive=0.7,batch=0.3", burst_size=(4, 8),
            class_output_tokens=(("batch", "uniform:128-256"),),
        ),
        str(PROFILES_DIR / "smollm2-135m-cpu.yaml"),  # packaged: the same on every machine
        8, "examples/gateway-demo-vllm-cpu.yaml", 3.0,
    ),
}  # fmt: skip


CLI = (sys.executable, "-m", "burstguard.cli")
PREEMPTIONS = "burstguard_preemptions_total"


class Live:
    """The emulator, and the way in under test (`epp`: Envoy + the picker; `gateway`),
    started once; `run` sends one workload to each and measures it as the sim does."""

    def __init__(self, setup: Setup, config: GatewayConfig, config_path: str, via: str,
                 tmp: Path, retry: str = "none") -> None:  # fmt: skip
        self.setup, self.tmp, self.via, self.retry = setup, tmp, via, retry
        self.speedup = config.engine_speedup
        port = free_port()
        self.direct = f"http://127.0.0.1:{port}"
        self.procs = [ManagedProcess(
            [*CLI, "emulate", "--profile", setup.profile, "--port", str(port),
             "--max-num-seqs", str(setup.slots), "--speedup", str(self.speedup)],
            f"{self.direct}/health", log_path=tmp / "emulator.log",
        )]  # fmt: skip
        backend = ("--backend", self.direct)
        if via == "gateway":
            g_port = free_port()
            self.front = self.metrics = f"http://127.0.0.1:{g_port}"
            self.procs.append(ManagedProcess(
                [*CLI, "gateway", "--config", config_path, *backend, "--port", str(g_port)],
                f"{self.front}/health", log_path=tmp / "gateway.log",
            ))  # fmt: skip
        else:
            from bench_epp import ENVOY, envoy

            if not ENVOY.is_file():
                raise SystemExit(f"{ENVOY} not found: run `make envoy`")
            grpc_port, m_port = free_port(), free_port()
            self.metrics = f"http://127.0.0.1:{m_port}"
            self.procs.append(ManagedProcess(
                [*CLI, "epp", "--config", config_path, *backend, "--grpc-port",
                 str(grpc_port), "--metrics-port", str(m_port)],
                f"{self.metrics}/health", log_path=tmp / "epp.log",
            ))  # fmt: skip
            proxy = envoy(tmp, "envoy-epp", grpc_port, None)
            self.front = proxy.base_url  # type: ignore[attr-defined]
            self.procs.append(proxy)

    @contextlib.contextmanager
    def started(self) -> Iterator[Live]:
        with contextlib.ExitStack() as stack:
            for p in self.procs:
                stack.enter_context(p)
            yield self

    def _bench(self, target: str, workload: Path, out: Path) -> RunFigures:
        cmd = [*CLI, "bench", "--target", target, "--workload", str(workload), "--speedup",
               str(self.speedup), "--out", str(out), "--retry", self.retry]  # fmt: skip
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode not in (0, 1):
            raise SystemExit(f"bench failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        return figures(list(read_records(out / "records.jsonl")), self.setup.ttft_s)

    def _preemptions(self) -> int:
        with urllib.request.urlopen(self.metrics + "/metrics", timeout=10) as resp:
            found = parse_metrics(resp.read().decode())
        return int(sum(v for k, v in found.items() if k.startswith(PREEMPTIONS)))  # per class

    def run(self, workload: Workload, name: str) -> tuple[RunFigures, RunFigures]:
        """(direct, via) figures of one workload, sent live."""
        path = self.tmp / f"{name}.jsonl"
        write_workload(path, workload)
        d = self._bench(self.direct, path, self.tmp / f"{name}-direct")
        before = self._preemptions()
        g = self._bench(self.front, path, self.tmp / f"{name}-{self.via}")
        return d, replace(g, preemptions=self._preemptions() - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine",
        choices=sorted(SETUPS),
        default="emulator",
        help="whose demo mix, profile, slots and SLO (default: emulator)",
    )
    parser.add_argument("--config", help="gateway config (default: the engine's demo config)")
    parser.add_argument("--loads", default="0.7,0.8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument(
        "--live",
        choices=("epp", "gateway"),
        help="measure it live through Envoy + burstguard epp, or the gateway",
    )
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--retry", choices=("none", "exponential"), default="none",
        help="the clients retry (bench's live, on both legs; the simulator's in virtual "
        "time; exponential: 3 retries, 0.5-8 s backoff, Retry-After honoured): a request "
        "cut by a preemption is sent again",
    )  # fmt: skip
    parser.add_argument(
        "--epp", action="store_true",
        help="virtual time: the config as `burstguard epp` runs it (the --live epp prediction)",
    )  # fmt: skip
    args = parser.parse_args()
    setup = SETUPS[args.engine]
    profile = Profile.load(setup.profile)
    engine = EngineConfig(max_num_seqs=setup.slots)
    config_path = args.config or setup.config
    config = GatewayConfig.load(config_path)
    cap = capacity(setup.mix, engine, profile)
    retry = None if args.retry == "none" else ClientRetry(RetryPolicy("exponential"))
    via = args.live or "gateway"
    how = (f"live through {'Envoy + burstguard epp' if via == 'epp' else 'burstguard gateway'}"
           if args.live else "virtual time" + (" as burstguard epp runs it" if args.epp
                                               else ""))  # fmt: skip
    print(f"capacity {cap:.2f} req/s ({setup.slots} slots, backlog drained); "
          f"config {config_path}; {how}")  # fmt: skip
    print(f"| load | seed | interactive TTFT <= {setup.ttft_s:g} s direct / {via} | "
          f"output tok/s direct / {via} (share) | batch TTFT p95 direct / {via} | "
          "preemptions |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    worst_att, worst_share = 1.0, float("inf")
    with contextlib.ExitStack() as stack:
        live = None
        if args.live:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            live = stack.enter_context(
                Live(setup, config, config_path, via, tmp, args.retry).started()
            )
        for load in (float(x) for x in args.loads.split(",")):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                spec = replace(setup.mix, rate=load * cap, seed=seed, duration_s=args.duration)
                wl = synthesize(spec)
                if live is None:
                    d, g = compare(wl, engine, profile, config, setup.ttft_s, args.epp, retry)
                else:
                    d, g = live.run(wl, f"{load:g}-{seed}")
                share = g.output_tokens_per_s / d.output_tokens_per_s
                worst_att, worst_share = (
                    min(worst_att, g.interactive_ttft_attainment),
                    min(worst_share, share),
                )
                print(
                    f"| {load:.0%} | {seed} | {d.interactive_ttft_attainment:.1%} / "
                    f"{g.interactive_ttft_attainment:.1%} | {d.output_tokens_per_s:,.0f} / "
                    f"{g.output_tokens_per_s:,.0f} ({share:.1%}) | "
                    f"{d.batch_ttft_p95_s or 0:.1f} / {g.batch_ttft_p95_s or 0:.1f} s | "
                    f"{g.preemptions} |",
                    flush=True,
                )
    print(f"worst: interactive {worst_att:.1%}, throughput {worst_share:.1%} of direct "
          f"({time.perf_counter() - t0:.1f} s wall)")  # fmt: skip


if __name__ == "__main__":
    main()
