"""The must-show table of docs/gateway.md: the demo's mixed workload through a gateway
config in virtual time, direct vs gateway, at 70% and 80% of capacity on seeds 0-4.

70% interactive chat (1024 prompt / 256 output tokens), 30% batch (uniform 512-1024
output tokens), the seed's burst pattern, llama3-8b-h100 with 48 slots. Per run:
interactive TTFT <= 1 s (shed = miss), output tokens/s over the run vs direct, batch
TTFT p95, the gateway's preemptions. The goal: >= 99% and >= 95% in every run.

Run: .venv/bin/python benchmarks/gateway_table.py [--config examples/gateway-demo.yaml]
"""

from __future__ import annotations

import argparse
import time

from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.gateway.config import GatewayConfig
from burstguard.sim.compare import capacity, compare
from burstguard.workload.synth import PatternSpec, synthesize

MIX = PatternSpec(
    pattern="burst", duration_s=60.0, prompt_tokens="1024", output_tokens="256",
    classes="interactive=0.7,batch=0.3", class_output_tokens=(("batch", "uniform:512-1024"),),
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/gateway-demo.yaml")
    parser.add_argument("--loads", default="0.7,0.8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=60.0)
    args = parser.parse_args()
    profile = Profile.load("llama3-8b-h100")
    engine = EngineConfig(max_num_seqs=48)
    config = GatewayConfig.load(args.config)
    cap = capacity(MIX, engine, profile)
    print(f"capacity {cap:.2f} req/s (48 slots, backlog drained); config {args.config}")
    print("| load | seed | interactive TTFT <= 1 s direct / gateway | output tok/s direct / "
          "gateway (share) | batch TTFT p95 direct / gateway | preemptions |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    worst_att, worst_share = 1.0, float("inf")
    for load in (float(x) for x in args.loads.split(",")):
        for seed in range(args.seeds):
            spec = PatternSpec(**{**MIX.__dict__, "rate": load * cap, "seed": seed,
                                  "duration_s": args.duration})  # fmt: skip
            d, g = compare(synthesize(spec), engine, profile, config, ttft_target_s=1.0)
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
