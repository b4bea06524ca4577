"""Virtual-clock driver: replays a workload on one EngineCore as fast as the CPU allows.

Same engine core as the emulator (one core, two clocks); time is the engine's own, kept by
an event heap (`sim.heap`), and the engine is stepped by the one replica stepper
(`sim.replicas`). `burstguard.sim.closed` sends closed-loop clients through the same
driver; `burstguard.sim.gateway_loop` puts the gateway core in front of the same
stepper's replicas, on the same kind of heap.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.core import DecodeRun, EngineRequest, RequestRejected, StepResult
from burstguard.core.engine.kv_cache import expand_block_hashes
from burstguard.core.engine.profile import Profile
from burstguard.sim.heap import EventHeap
from burstguard.sim.replicas import CLOSED, DIRECT, ReplicaSet
from burstguard.sim.series import SeriesRecorder
from burstguard.wire.records import RequestRecord
from burstguard.workload.sessions import Dependencies
from burstguard.workload.spec import RequestSpec, Workload, priority_of


@dataclass
class SimResult:
    records: list[RequestRecord]
    preemptions: int
    steps: int
    end_s: float
    series: dict[str, Any] | None = None  # `server_series`: the engine's gauges (sim.series)
    prefix_cache: tuple[int, int] = (0, 0)  # prompt tokens looked up in prefix caches, hit


@dataclass(init=False)  # (init=False: see core.engine.perf_model.BatchShape)
class StepEvents:
    """What a step meant to the clients: who saw a first token, who finished."""

    first_token: list[str]
    finished: list[str]

    def __init__(self) -> None:
        self.first_token = []
        self.finished = []


class _Client:
    """One request as its client sees it: its record, the output tokens it received, when
    the last one came, and the tokens it had when the request was last resumed as a new
    engine request (whose own count starts again at 1: the engine's counts are offset by
    this). One object per request in place of a dict per field, so a token costs one
    lookup by id (mypyc compiles it: `setup.py`); `itl` is the record's own list, held
    here because the record's class is not compiled (each attribute read is a lookup)."""

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.itl = rec.itl_s
        self.produced = 0
        self.last_at = 0.0
        self.base = 0


class RecordBook:
    """Client-side records (TTFT, ITL, E2E) from engine step results, as a client would
    see them: a token recomputed after a preemption is not seen twice. A request's client
    state moves to another table when it finishes, so the one looked up once per token
    holds the requests under way (small: the cache holds it) and not a long run's
    millions of finished ones; a finished one is still found (a copy of it that another
    engine still ran, after a failover, may report tokens later)."""

    def __init__(self) -> None:
        self.records: dict[str, RequestRecord] = {}
        self._clients: dict[str, _Client] = {}  # under way
        self._done: dict[str, _Client] = {}  # finished

    def _client(self, rid: str) -> _Client:
        client = self._clients.get(rid)
        return client if client is not None else self._done[rid]

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
        self._clients[spec.id] = _Client(rec)
        return rec

    def produced(self, rid: str) -> int:
        """The output tokens `rid`'s client has received."""
        return self._client(rid).produced

    def resume(self, rid: str) -> None:
        """`rid` goes on as a new engine request: its counts continue what its client has."""
        client = self._client(rid)
        client.base = client.produced

    def resumed(self, rid: str) -> int:
        """The tokens `rid`'s client had when it was last resumed (0: never)."""
        return self._client(rid).base

    def apply(self, result: StepResult) -> StepEvents:
        events = StepEvents()
        now = result.end_s
        clients = self._clients
        for rid in result.started:
            rec = self._client(rid).rec
            if rec.queue_s is None:
                rec.queue_s = result.start_s - rec.scheduled_s
        first_token = events.first_token
        for rid, count in result.tokens:  # (once per token: locals, one lookup each)
            client = clients.get(rid)
            if client is None:
                client = self._done[rid]
            count += client.base
            had = client.produced
            if count <= had:
                continue  # recomputed after preemption: the client already has it
            client.produced = count
            if had == 0:  # its first token (`ttft_s` is set exactly then)
                rec = client.rec
                rec.ttft_s = now - rec.scheduled_s
                first_token.append(rid)
            else:
                client.itl.append(now - client.last_at)
            client.last_at = now
        for rid in result.finished:
            self._finish(self._retire(rid), now)
            events.finished.append(rid)
        return events

    def apply_run(self, run: DecodeRun) -> None:
        """`apply` for a fast-forwarded run of decode steps, token for token the same."""
        ends = run.ends
        gaps = [b - a for a, b in itertools.pairwise(ends)]
        k = len(ends)
        clients = self._clients
        last_end = ends[-1]
        for rid, n, count in run.tokens:
            client = clients.get(rid)
            if client is None:
                client = self._done[rid]
            count += client.base
            had = client.produced
            new = count - had
            if new > n:
                new = n
            if new <= 0:
                continue
            first = n - new
            client.produced = count
            itl = client.itl
            if had == 0:  # its first token (`ttft_s` is set exactly then)
                rec = client.rec
                rec.ttft_s = ends[first] - rec.scheduled_s
            else:
                itl.append(ends[first] - client.last_at)
            if n == k and first == 0:  # the whole run (the common case): no slicing
                itl.extend(gaps)
                client.last_at = last_end
            else:
                itl.extend(gaps[first : n - 1])
                client.last_at = ends[n - 1]
        for rid in run.finished:
            client = self._retire(rid)
            self._finish(client, client.last_at)

    def _retire(self, rid: str) -> _Client:
        """`rid` finished: its client state moves to the finished ones."""
        client = self._clients.pop(rid, None)
        if client is None:  # finished before (a copy of it on another engine)
            return self._done[rid]
        self._done[rid] = client
        return client

    @staticmethod
    def _finish(client: _Client, now: float) -> None:
        rec = client.rec
        rec.e2e_s = now - rec.scheduled_s
        rec.completion_tokens = client.produced
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


ONE = "http://replica-0"  # the one replica of a direct run (`sim.replicas.replica_id(0)`)
# ties at one instant: a step's end, then arrivals, then the step that takes them in
ARRIVAL, BEGIN = 1, 2  # a step's end is 0 (`sim.replicas.STEP`)

OnFinished = Callable[[str, float], list[RequestSpec]]


class DirectSim:
    """Clients straight to one engine replica (no gateway) on the event heap: arrivals as
    events, the replica stepped by `sim.replicas.ReplicaSet` (the stepper every mode
    shares). A step begins after the arrivals of its instant, as a live engine loop takes
    what arrived while its last step ran. Open loop schedules a workload's arrivals;
    closed loop (`sim.closed`) passes `on_finished`, which returns the requests a finish
    (or a refusal) at that time makes its clients send."""

    def __init__(
        self,
        config: EngineConfig,
        profile: Profile,
        prefix_block_tokens: int,
        fast_forward: bool = True,
        on_finished: OnFinished | None = None,
    ) -> None:
        self.heap = EventHeap()
        self.replicas = ReplicaSet(
            self.heap, config, profile, self._step_end, self._run_end if fast_forward else None,
            fast_forward=DIRECT if on_finished is None else CLOSED, begin_rank=BEGIN,
        )  # fmt: skip
        self.replicas.add_replica(ONE, 0.0)
        self.core = self.replicas.engine(ONE)
        self.recorder = SeriesRecorder(self.core)
        self.book = RecordBook()
        self.block_tokens = prefix_block_tokens
        self.on_finished = on_finished
        self.order: list[str] = []  # request ids as sent (closed loop: as the clients made them)

    def send(self, specs: list[RequestSpec]) -> None:
        """Schedules each spec's arrival at its `arrival_s`."""
        for spec in specs:
            self.order.append(spec.id)
            self.heap.at(spec.arrival_s, ARRIVAL, partial(self.arrive, spec))

    def arrive(self, spec: RequestSpec, now: float) -> None:
        core = self.core
        prompt = served_prompt(spec, core.profile)
        rec = self.book.open(spec, prompt)
        req = EngineRequest(
            spec.id, prompt, spec.max_tokens, spec.arrival_s, priority_of(spec.priority_class),
            engine_prefix(spec, self.block_tokens, core.config.block_size),
        )  # fmt: skip
        try:
            self.replicas.add_request(ONE, req, spec.arrival_s)
        except RequestRejected:
            rec.error = "rejected"
            self._finished([spec.id], now)
        self.replicas.kick(ONE, now)

    def _finished(self, ids: list[str], now: float) -> None:
        if self.on_finished is not None:
            for rid in ids:
                self.send(self.on_finished(rid, now))

    def _step_end(self, _: str, result: StepResult, now: float) -> None:
        events = self.book.apply(result)
        self.recorder.observe(now, result.num_prefill_tokens + result.num_decode_seqs, 1)
        self._finished(events.finished, now)

    def _run_end(self, _: str, run: DecodeRun, now: float) -> None:
        self.book.apply_run(run)
        self.recorder.observe(now, sum(k for _, k, _ in run.tokens), len(run.ends))
        self._finished(run.finished, now)

    def run(self, progress: Callable[[float], None] | None = None) -> SimResult:
        """Runs every arrival sent so far, and those they cause, to the end."""
        end = self.heap.run(progress)
        result = SimResult(
            records=[self.book.records[rid] for rid in self.order],
            preemptions=self.replicas.preemptions,
            steps=self.replicas.steps,
            end_s=end,
            series=self.recorder.series(end),
            prefix_cache=self.replicas.prefix_cache,
        )
        self.replicas.detach()
        return result


def simulate(
    workload: Workload,
    config: EngineConfig,
    profile: Profile,
    fast_forward: bool = True,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Runs every request of `workload` to completion (or rejection) in virtual time.
    `fast_forward` applies runs of pure decode steps at once (`sim.replicas`); the
    results are the same, only computed faster. `progress(virtual now)` is called now and
    then (`EventHeap.run`). A session workload (`workload.sessions`) sends each request
    that waits for others when they have ended (plus its think time), as bench does."""
    deps = Dependencies.of(workload)
    if deps is None:
        sim = DirectSim(config, profile, workload.prefix_block_tokens, fast_forward)
        rows = workload.rows()
        sim.send([rows.spec(i) for i in range(len(rows))])
        return sim.run(progress)
    sessions = SessionClient(workload, deps)
    sim = DirectSim(config, profile, workload.prefix_block_tokens, fast_forward, sessions.ended)
    sim.send(sessions.start())
    return sim.run(progress)


class SessionClient:
    """The clients of a session workload in virtual time: the sessions' first requests at
    their arrivals, each other request once `Dependencies` releases it, with `arrival_s`
    (its record's scheduled time) the moment it is sent."""

    def __init__(self, workload: Workload, deps: Dependencies) -> None:
        self.workload = workload
        self.deps = deps
        self.index = {workload.request_id(i): i for i in range(len(workload))}

    def start(self) -> list[RequestSpec]:
        return [self.workload.spec(i) for i in self.deps.roots]

    def ended(self, request_id: str, now: float) -> list[RequestSpec]:
        released = self.deps.ended(self.index[request_id], now)
        return [replace(self.workload.spec(j), arrival_s=at) for j, at in released]
