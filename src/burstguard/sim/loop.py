"""Virtual-clock driver: replays a workload on one EngineCore as fast as the CPU allows.

Same engine core as the emulator (one core, two clocks); time is the engine's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from burstguard.bench.records import RequestRecord
from burstguard.engine.config import EngineConfig
from burstguard.engine.core import EngineCore, EngineRequest, RequestRejected
from burstguard.engine.profile import Profile
from burstguard.workload.spec import Workload, priority_of


@dataclass
class SimResult:
    records: list[RequestRecord]
    preemptions: int
    steps: int
    end_s: float


def simulate(workload: Workload, config: EngineConfig, profile: Profile) -> SimResult:
    """Runs every request of `workload` to completion (or rejection) in virtual time."""
    core = EngineCore(config, profile)
    n = len(workload)
    arrivals = workload.arrival_s.tolist()
    records: dict[str, RequestRecord] = {}
    last_token_at: dict[str, float] = {}
    produced: dict[str, int] = {}
    i, now, steps = 0, 0.0, 0
    while True:
        while i < n and arrivals[i] <= now:
            spec = workload.spec(i)
            rec = RequestRecord(
                id=spec.id, scheduled_s=spec.arrival_s, sent_s=spec.arrival_s,
                prompt_tokens=spec.prompt_tokens, priority_class=spec.priority_class,
                tenant=spec.tenant,
            )  # fmt: skip
            records[spec.id] = rec
            try:
                core.add_request(
                    EngineRequest(
                        id=spec.id,
                        prompt_tokens=spec.prompt_tokens,
                        max_tokens=spec.max_tokens,
                        arrival_s=spec.arrival_s,
                        priority=priority_of(spec.priority_class),
                        prefix_hashes=spec.prefix_hashes,
                    ),
                    spec.arrival_s,
                )
            except RequestRejected:
                rec.error = "rejected"
            i += 1
        end = core.begin_step(now)
        if end is None:
            if i >= n:
                break
            now = arrivals[i]
            continue
        result = core.end_step()
        steps += 1
        now = result.end_s
        for rid in result.started:
            rec = records[rid]
            if rec.queue_s is None:
                rec.queue_s = result.start_s - rec.scheduled_s
        for rid, count in result.tokens:
            if count <= produced.get(rid, 0):
                continue  # recomputed after preemption: the client already has it
            produced[rid] = count
            rec = records[rid]
            if rec.ttft_s is None:
                rec.ttft_s = now - rec.scheduled_s
            else:
                rec.itl_s.append(now - last_token_at[rid])
            last_token_at[rid] = now
        for rid in result.finished:
            rec = records[rid]
            rec.e2e_s = now - rec.scheduled_s
            rec.completion_tokens = produced.get(rid, 0)
            rec.status = 200
    return SimResult(
        records=[records[workload.request_id(k)] for k in range(n)],
        preemptions=core.stats.num_preemptions_total,
        steps=steps,
        end_s=now,
    )
