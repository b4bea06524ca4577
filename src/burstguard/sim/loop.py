"""Virtual-clock driver: replays a workload on one EngineCore as fast as the CPU allows.

Same engine core as the emulator (one core, two clocks); time is the engine's own, kept by
an event heap (`sim.heap`). `burstguard.sim.gateway_loop` puts the gateway core in front
of the same engine, on the same kind of heap.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from burstguard.bench.records import RequestRecord
from burstguard.engine.config import EngineConfig
from burstguard.engine.core import (
    DecodeRun,
    EngineCore,
    EngineRequest,
    RequestRejected,
    StepResult,
)
from burstguard.engine.kv_cache import expand_block_hashes
from burstguard.engine.profile import Profile
from burstguard.sim.heap import EventHeap
from burstguard.sim.series import SeriesRecorder
from burstguard.workload.spec import RequestSpec, Workload, priority_of


@dataclass
class SimResult:
    records: list[RequestRecord]
    preemptions: int
    steps: int
    end_s: float
    series: dict[str, Any] | None = None  # `server_series`: the engine's gauges (sim.series)
    prefix_cache: tuple[int, int] = (0, 0)  # prompt tokens looked up in prefix caches, hit


@dataclass
class StepEvents:
    """What a step meant to the clients: who saw a first token, who finished."""

    first_token: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


class RecordBook:
    """Client-side records (TTFT, ITL, E2E) from engine step results, as a client would
    see them: a token recomputed after a preemption is not seen twice."""

    def __init__(self) -> None:
        self.records: dict[str, RequestRecord] = {}
        self.produced: dict[str, int] = {}
        self._last_token_at: dict[str, float] = {}
        # tokens the client had when its request was resumed as a new engine request (whose
        # own count starts again at 1): the engine's counts are offset by this
        self.resumed_at: dict[str, int] = {}

    def open(
        self, spec: RequestSpec, prompt_tokens: int, priority_class: str | None = None
    ) -> RequestRecord:
        """A record for `spec`; `prompt_tokens` as the engine counts them (`served_prompt`)."""
        rec = RequestRecord(
            id=spec.id, scheduled_s=spec.arrival_s, sent_s=spec.arrival_s,
            prompt_tokens=prompt_tokens,
            priority_class=priority_class if priority_class is not None else spec.priority_class,
            tenant=spec.tenant,
        )  # fmt: skip
        self.records[spec.id] = rec
        return rec

    def apply(self, result: StepResult) -> StepEvents:
        events = StepEvents()
        now = result.end_s
        for rid in result.started:
            rec = self.records[rid]
            if rec.queue_s is None:
                rec.queue_s = result.start_s - rec.scheduled_s
        base = self.resumed_at
        for rid, count in result.tokens:
            if base:
                count += base.get(rid, 0)
            if count <= self.produced.get(rid, 0):
                continue  # recomputed after preemption: the client already has it
            self.produced[rid] = count
            rec = self.records[rid]
            if rec.ttft_s is None:
                rec.ttft_s = now - rec.scheduled_s
                events.first_token.append(rid)
            else:
                rec.itl_s.append(now - self._last_token_at[rid])
            self._last_token_at[rid] = now
        for rid in result.finished:
            self._finish(rid, now)
            events.finished.append(rid)
        return events

    def apply_run(self, run: DecodeRun) -> None:
        """`apply` for a fast-forwarded run of decode steps, token for token the same."""
        ends = run.ends
        gaps = [b - a for a, b in itertools.pairwise(ends)]
        for rid, n, count in run.tokens:
            count += self.resumed_at.get(rid, 0)
            new = min(n, count - self.produced.get(rid, 0))
            if new <= 0:
                continue
            first = n - new
            self.produced[rid] = count
            rec = self.records[rid]
            if rec.ttft_s is None:
                rec.ttft_s = ends[first] - rec.scheduled_s
            else:
                rec.itl_s.append(ends[first] - self._last_token_at[rid])
            rec.itl_s.extend(gaps[first : n - 1])
            self._last_token_at[rid] = ends[n - 1]
        for rid in run.finished:
            self._finish(rid, self._last_token_at[rid])

    def _finish(self, rid: str, now: float) -> None:
        rec = self.records[rid]
        rec.e2e_s = now - rec.scheduled_s
        rec.completion_tokens = self.produced.get(rid, 0)
        rec.status = 200


def add_hop_latency(records: list[RequestRecord], latency_s: float) -> None:
    """Adds the serving path's own per-request latency outside the engine (the HTTP hops
    client -> gateway -> engine and back, the servers' parsing and streaming) to what each
    client saw: `latency_s` more to every first token and every answer (a 429 travels the
    same hops). The engine's own times, the token gaps and the policies' decisions stay
    as simulated: first order, exact for a lone request. Measure it as a lone request's
    TTFT through the live path minus the simulator's (benchmarks/fleet_sim_vs_live.py)."""
    if latency_s < 0:
        raise ValueError("latency_s must be >= 0")
    for rec in records:
        if rec.ttft_s is not None:
            rec.ttft_s += latency_s
        if rec.e2e_s is not None:
            rec.e2e_s += latency_s


def served_prompt(spec: RequestSpec, profile: Profile) -> int:
    """The prompt as the engine counts it: the sim serves every request the way `burstguard
    bench` sends it by default, as a chat request, so the profile's chat template tokens are
    added (as the emulator does, and the real engine's template does)."""
    return spec.prompt_tokens + profile.chat_template_tokens


def engine_prefix(spec: RequestSpec, block_tokens: int, block_size: int) -> tuple[int, ...]:
    """The spec's prefix blocks (of `block_tokens` tokens, the workload's) as the engine's
    `block_size`-token blocks (`engine.kv_cache.expand_block_hashes`)."""
    if not spec.prefix_hashes:
        return ()
    return expand_block_hashes(spec.prefix_hashes, block_tokens, block_size, spec.prompt_tokens)


class _EngineSim:
    """Clients and one engine replica on an event heap (`sim.heap`): arrivals, and the
    replica's steps (or fast-forwarded runs of decode steps) as events. A step begins
    after the arrivals of its instant (STEP < ARRIVAL < BEGIN), as a live engine loop
    takes what arrived while its last step ran."""

    STEP, ARRIVAL, BEGIN = range(3)

    def __init__(
        self, workload: Workload, config: EngineConfig, profile: Profile, fast_forward: bool
    ) -> None:
        self.workload = workload
        self.core = EngineCore(config, profile)
        self.recorder = SeriesRecorder(self.core)
        self.book = RecordBook()
        self.heap = EventHeap()
        self.fast_forward = fast_forward
        self.steps = 0
        self._begin_pending = False
        self._busy_until = 0.0  # the end of a fast-forwarded run (already applied)

    def arrive(self, i: int, now: float) -> None:
        spec = self.workload.spec(i)
        prompt = served_prompt(spec, self.core.profile)
        rec = self.book.open(spec, prompt)
        try:
            self.core.add_request(
                EngineRequest(
                    id=spec.id,
                    prompt_tokens=prompt,
                    max_tokens=spec.max_tokens,
                    arrival_s=spec.arrival_s,
                    priority=priority_of(spec.priority_class),
                    prefix_hashes=engine_prefix(
                        spec, self.workload.prefix_block_tokens, self.core.config.block_size
                    ),
                ),
                spec.arrival_s,
            )
        except RequestRejected:
            rec.error = "rejected"
        self.kick(now)

    def kick(self, now: float) -> None:
        """The replica begins its next step at `now`, after this instant's arrivals."""
        if now < self._busy_until:
            return  # the run's end kicks it
        if self._begin_pending or self.core.step_in_flight:
            return
        if self.heap.next_time() > now:  # nothing else at this instant: no event needed
            self.begin(now)
        else:
            self._begin_pending = True
            self.heap.at(now, self.BEGIN, self.begin)

    def begin(self, now: float) -> None:
        self._begin_pending = False
        if self.core.step_in_flight:
            return
        if self.fast_forward:
            run = self.core.run_decodes(now, self.heap.next_time())
            if run is not None:
                self.steps += len(run.ends)
                self.book.apply_run(run)
                self.recorder.observe(run.ends[-1], sum(k for _, k, _ in run.tokens), len(run.ends))
                self._busy_until = run.ends[-1]
                self.heap.at(run.ends[-1], self.STEP, self.kick)
                return
        end = self.core.begin_step(now)
        if end is not None:
            self.heap.at(end, self.STEP, self.step_end)

    def step_end(self, now: float) -> None:
        result = self.core.end_step()
        self.steps += 1
        self.book.apply(result)
        self.recorder.observe(now, result.num_prefill_tokens + result.num_decode_seqs, 1)
        self.kick(now)

    def run(self, progress: Callable[[float], None] | None = None) -> SimResult:
        for i, t in enumerate(self.workload.arrival_s.tolist()):
            self.heap.at(t, self.ARRIVAL, partial(self.arrive, i))
        end = self.heap.run(progress)
        n = len(self.workload)
        return SimResult(
            records=[self.book.records[self.workload.request_id(k)] for k in range(n)],
            preemptions=self.core.stats.num_preemptions_total,
            steps=self.steps,
            end_s=end,
            series=self.recorder.series(end),
            prefix_cache=(
                self.core.stats.prefix_cache_queries_total,
                self.core.stats.prefix_cache_hits_total,
            ),
        )


def simulate(
    workload: Workload,
    config: EngineConfig,
    profile: Profile,
    fast_forward: bool = True,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Runs every request of `workload` to completion (or rejection) in virtual time.
    `fast_forward` applies runs of pure decode steps at once (`EngineCore.run_decodes`);
    the results are the same, only computed faster. `progress(virtual now)` is called
    now and then (`EventHeap.run`)."""
    return _EngineSim(workload, config, profile, fast_forward).run(progress)
