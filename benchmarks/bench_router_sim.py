"""A virtual-time preview of the fleet router: four simulated engines (2 x llama3-8b-h100,
2 x llama3-8b-a100, the same --max-num-seqs) at 75 % of their summed capacity, each
policy on the same workload. TTFT percentiles, output tokens/s, share per engine.

Every request is routed on arrival (no gateway queue, as `vllm-router` does); the
engines' /metrics are sampled every 0.25 s (the router sees them that stale); the
gateway's own in-flight counts are exact. Each engine's capacity is measured alone first,
on a batch of the same length mix. The router alone, with no gateway queue in front:
`burstguard sim --gateway CONFIG --replicas N` runs the gateway core (queue, caps and
router) over N replicas; `benchmarks/bench_router.py` is the live comparison.

Run: .venv/bin/python benchmarks/bench_router_sim.py [--max-num-seqs 64]
       [--prompt lognormal:mean=1024,sigma=0.7] [--output lognormal:mean=256,sigma=0.8]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import EngineCore, EngineRequest
from burstguard.core.engine.profile import Profile
from burstguard.core.fleet.config import RouterConfig
from burstguard.core.fleet.router import BackendView, Router, RouteRequest
from burstguard.core.fleet.state import BackendState
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize

PROFILES = ("llama3-8b-h100", "llama3-8b-h100", "llama3-8b-a100", "llama3-8b-a100")
POLICIES = ("round_robin", "least_request", "score")
SCRAPE_S = 0.25
MAX_PROMPT, MAX_OUTPUT = 6000, 2000  # within the profiles' max_model_len


@dataclass
class Result:
    ttft_p50: float
    ttft_p95: float
    tokens_per_s: float
    shares: list[float]


def _lengths(wl: Workload, i: int) -> tuple[int, int]:
    return min(MAX_PROMPT, int(wl.prompt_tokens[i])), min(MAX_OUTPUT, int(wl.output_tokens[i]))


def capacity(profile: str, seqs: int, sample: Workload) -> float:
    """Output tokens/s of one engine draining `sample`, all sent at once."""
    engine = EngineCore(EngineConfig(max_num_seqs=seqs), Profile.load(profile))
    for i in range(len(sample)):
        p, o = _lengths(sample, i)
        engine.add_request(EngineRequest(f"c{i}", p, o, 0.0), 0.0)
    now, out = 0.0, 0
    while engine.has_unfinished:
        end = engine.begin_step(now)
        assert end is not None
        out += len(engine.end_step().tokens)
        now = end
    return out / now


def run(policy: str, wl: Workload, seqs: int) -> Result:
    engines = [EngineCore(EngineConfig(max_num_seqs=seqs), Profile.load(p)) for p in PROFILES]
    n = len(engines)
    router = Router(RouterConfig(policy=policy))
    own: list[dict[str, int]] = [{} for _ in engines]
    seen = [BackendState(0, 0, 0.0) for _ in engines]
    seq = itertools.count()
    events: list[tuple[float, int, str, int]] = [
        (float(wl.arrival_s[i]), next(seq), "arrive", i) for i in range(len(wl))
    ]
    events.append((0.0, next(seq), "scrape", -1))
    heapq.heapify(events)
    arrived: dict[str, float] = {}
    ttft: dict[str, float] = {}
    routed = [0] * n
    stepping = [False] * n
    out_tokens, last_end, left = 0, 0.0, len(wl)

    def kick(k: int, now: float) -> None:
        if not stepping[k] and engines[k].has_unfinished:
            end = engines[k].begin_step(now)
            if end is not None:
                stepping[k] = True
                heapq.heappush(events, (end, next(seq), "step", k))

    while events and left:
        now, _, kind, x = heapq.heappop(events)
        if kind == "arrive":
            rid = f"r{x}"
            p, o = _lengths(wl, x)
            views = [
                BackendView(str(k), len(own[k]), sum(own[k].values()),
                            waiting=seen[k].waiting, kv_usage=seen[k].kv_usage)
                for k in range(n)
            ]  # fmt: skip
            k = int(router.pick(RouteRequest(p + o), views) or 0)
            own[k][rid] = p + o
            routed[k] += 1
            arrived[rid] = now
            engines[k].add_request(EngineRequest(rid, p, o, now), now)
            kick(k, now)
        elif kind == "step":
            stepping[x] = False
            step = engines[x].end_step()
            out_tokens += len(step.tokens)
            for rid, count in step.tokens:
                if count == 1 and rid not in ttft:
                    ttft[rid] = step.end_s - arrived[rid]
            for rid in step.finished:
                own[x].pop(rid, None)
                left -= 1
                last_end = step.end_s
            kick(x, now)
        else:
            for k, e in enumerate(engines):
                s = e.stats
                seen[k] = BackendState(s.num_waiting, s.num_running, s.kv_cache_usage)
            heapq.heappush(events, (now + SCRAPE_S, next(seq), "scrape", -1))
    t = np.array(list(ttft.values()))
    return Result(
        float(np.percentile(t, 50)),
        float(np.percentile(t, 95)),
        out_tokens / last_end,
        [r / len(wl) for r in routed],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--prompt", default="lognormal:mean=1024,sigma=0.7")
    ap.add_argument("--output", default="lognormal:mean=256,sigma=0.8")
    ap.add_argument("--duration-s", type=float, default=120.0)
    args = ap.parse_args()
    lengths = {"prompt_tokens": args.prompt, "output_tokens": args.output}
    sample = synthesize(PatternSpec(duration_s=10, rate=60, seed=9, **lengths))
    caps = {p: capacity(p, args.max_num_seqs, sample) for p in sorted(set(PROFILES))}
    total = sum(caps[p] for p in PROFILES)
    mean_out = float(np.minimum(sample.output_tokens, MAX_OUTPUT).mean())
    rate = 0.75 * total / mean_out
    print(f"capacity alone (output tok/s): {', '.join(f'{p} {c:.0f}' for p, c in caps.items())}; "
          f"sum of the four {total:.0f}")  # fmt: skip
    for pattern in ("poisson", "burst"):
        spec = PatternSpec(
            pattern=pattern, duration_s=args.duration_s, rate=rate, seed=1, **lengths
        )
        wl = synthesize(spec)
        print(f"\n{pattern}: {len(wl)} requests, {rate:.1f} req/s (75 % of capacity), "
              f"--max-num-seqs {args.max_num_seqs}")  # fmt: skip
        print("| policy | TTFT p50 | TTFT p95 | output tok/s to the last finish "
              "| share h100, h100, a100, a100 |")  # fmt: skip
        print("|---|---|---|---|---|")
        for policy in POLICIES:
            r = run(policy, wl, args.max_num_seqs)
            shares = ", ".join(f"{s:.3f}" for s in r.shares)
            print(f"| {policy} | {r.ttft_p50 * 1000:.0f} ms | {r.ttft_p95 * 1000:.0f} ms "
                  f"| {r.tokens_per_s:.0f} | {shares} |")  # fmt: skip


if __name__ == "__main__":
    main()
