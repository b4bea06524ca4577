"""Direct vs gateway on the same workload, in virtual time: the figures a gateway config is
judged by (the must-show table of docs/gateway.md, and `make demo` step 5's columns).

- `capacity`: requests per second an engine sustains on a mix, measured as the demo's
  closed loop does it, with every slot busy: a backlog of the mix, all arriving at once,
  divided by the time it takes to drain.
- `compare`: one workload run direct and through the gateway; per run, interactive TTFT
  attainment (a shed request is a miss), batch TTFT p95, output tokens per second over
  the run (all output tokens / the last completion), and the gateway's preemptions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.sim.client_retries import ClientRetry
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.sim.loop import simulate
from burstguard.wire.records import RequestRecord
from burstguard.workload.spec import Workload
from burstguard.workload.synth import PatternSpec, synthesize


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One run's figures (times in engine seconds)."""

    interactive_ttft_attainment: float  # share of interactive requests with TTFT <= target
    interactive_ttft_p95_s: float | None
    batch_ttft_p95_s: float | None
    output_tokens: int
    last_completion_s: float
    preemptions: int = 0
    reprefill_tokens: int = 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.last_completion_s if self.last_completion_s else 0.0


def figures(
    records: list[RequestRecord], ttft_target_s: float, preemptions: int = 0, reprefill: int = 0
) -> RunFigures:
    inter = [r for r in records if r.priority_class == "interactive"]
    met = sum(1 for r in inter if r.ok and r.ttft_s is not None and r.ttft_s <= ttft_target_s)
    done = [r for r in records if r.ok and r.e2e_s is not None]

    def p95(cls: str) -> float | None:
        ttft = [r.ttft_s for r in records if r.priority_class == cls and r.ok and r.ttft_s]
        return float(np.percentile(ttft, 95)) if ttft else None

    return RunFigures(
        interactive_ttft_attainment=met / len(inter) if inter else 1.0,
        interactive_ttft_p95_s=p95("interactive"),
        batch_ttft_p95_s=p95("batch"),
        output_tokens=sum(r.completion_tokens or 0 for r in done),
        last_completion_s=max((r.scheduled_s + (r.e2e_s or 0.0) for r in done), default=0.0),
        preemptions=preemptions,
        reprefill_tokens=reprefill,
    )


def capacity(mix: PatternSpec, engine: EngineConfig, profile: Profile, backlog: int = 480) -> float:
    """Requests/s the engine drains with every slot busy, on `mix`'s lengths and classes."""
    wl = synthesize(replace(mix, pattern="poisson", rate=backlog / 1e-3, duration_s=1e-3))
    wl = Workload(
        arrival_s=np.zeros(len(wl)),
        prompt_tokens=wl.prompt_tokens,
        output_tokens=wl.output_tokens,
        priority_class=wl.priority_class,
        tenant=wl.tenant,
    )
    result = simulate(wl, engine, profile)
    return len(wl) / result.end_s


def compare(
    workload: Workload,
    engine: EngineConfig,
    profile: Profile,
    gateway: GatewayConfig,
    ttft_target_s: float,
    epp: bool = False,
    retry: ClientRetry | None = None,
) -> tuple[RunFigures, RunFigures]:
    """(direct, gateway) figures of one workload (`epp`: the gateway as the picker runs it;
    `retry`: its clients retry errors, as bench's `--retry`)."""
    direct = simulate(workload, engine, profile)
    gw = simulate_gateway(workload, engine, profile, gateway, epp=epp, retry=retry)
    preempted = sum(gw.gateway.preemptions.values()) if gw.gateway is not None else 0
    return (
        figures(direct.records, ttft_target_s),
        figures(gw.records, ttft_target_s, preempted, gw.reprefill_tokens),
    )
