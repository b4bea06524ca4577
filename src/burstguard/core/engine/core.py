"""EngineCore: the engine as a pure state machine driven by timestamps.

It never reads a clock and never awaits: a driver calls `begin_step(now)`, waits (real
time in the emulator, virtual time in the simulator) until the returned end time, then
calls `end_step()`. Requests may be added or aborted while a step runs; they take effect
at the next step (an abort frees the request's blocks at once).
"""

from __future__ import annotations

from dataclasses import dataclass

from burstguard.core.engine.config import EngineConfig, EngineConfigError
from burstguard.core.engine.kv_cache import BlockPool
from burstguard.core.engine.profile import Profile
from burstguard.core.engine.request import EngineRequest, RequestStatus
from burstguard.core.engine.scheduler import ScheduledBatch, Scheduler

__all__ = [
    "DecodeRun",
    "EngineCore",
    "EngineRequest",
    "EngineStats",
    "RequestRejected",
    "StepResult",
    "check_priority",
]


class RequestRejected(ValueError):
    """The request can never run here (too long for max_model_len, or malformed)."""


def check_priority(config: EngineConfig, priority: int) -> None:
    """vLLM's rule at its API: a non-zero `priority` needs --scheduling-policy priority."""
    if priority != 0 and config.scheduling_policy != "priority":
        raise RequestRejected(
            f"Got priority {priority} but Priority scheduling is not enabled "
            "(start the engine with --scheduling-policy priority)"
        )


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class EngineStats:
    """Gauges and counters with the meaning of vLLM's /metrics of the same names."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_cache_queries_total: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits_total: int = 0  # ... of those, found cached

    def __init__(
        self,
        num_running: int,
        num_waiting: int,
        kv_cache_usage: float,
        num_preemptions_total: int,
        prompt_tokens_total: int,
        generation_tokens_total: int,
        prefix_cache_queries_total: int = 0,
        prefix_cache_hits_total: int = 0,
    ) -> None:
        self.num_running = num_running
        self.num_waiting = num_waiting
        self.kv_cache_usage = kv_cache_usage
        self.num_preemptions_total = num_preemptions_total
        self.prompt_tokens_total = prompt_tokens_total
        self.generation_tokens_total = generation_tokens_total
        self.prefix_cache_queries_total = prefix_cache_queries_total
        self.prefix_cache_hits_total = prefix_cache_hits_total


@dataclass(slots=True, init=False)  # (init=False: see `BatchShape`)
class StepResult:
    """What one step did. `tokens`: (request id, output tokens so far) for each request
    that produced a token at `end_s`; `started`: requests scheduled for the first time."""

    start_s: float
    end_s: float
    started: list[str]
    tokens: list[tuple[str, int]]
    finished: list[str]
    preempted: list[str]
    num_prefill_tokens: int
    num_decode_seqs: int

    def __init__(
        self,
        start_s: float,
        end_s: float,
        started: list[str] | None = None,
        tokens: list[tuple[str, int]] | None = None,
        finished: list[str] | None = None,
        preempted: list[str] | None = None,
        num_prefill_tokens: int = 0,
        num_decode_seqs: int = 0,
    ) -> None:
        self.start_s = start_s
        self.end_s = end_s
        self.started = [] if started is None else started
        self.tokens = [] if tokens is None else tokens
        self.finished = [] if finished is None else finished
        self.preempted = [] if preempted is None else preempted
        self.num_prefill_tokens = num_prefill_tokens
        self.num_decode_seqs = num_decode_seqs


@dataclass(slots=True, init=False)  # (init=False: see `BatchShape`)
class DecodeRun:
    """Consecutive pure-decode steps applied at once. Step j ended at `ends[j]`; each
    entry of `tokens` is (request id, number of these steps it took part in — the first
    ones —, output tokens after them); `finished` requests ended at their last step."""

    ends: list[float]
    tokens: list[tuple[str, int, int]]
    finished: list[str]

    def __init__(
        self, ends: list[float], tokens: list[tuple[str, int, int]], finished: list[str]
    ) -> None:
        self.ends = ends
        self.tokens = tokens
        self.finished = finished


class EngineCore:
    """One engine replica: scheduler, KV block pool and step-time model."""

    def __init__(self, config: EngineConfig, profile: Profile) -> None:
        self.config = config.resolved(profile.max_model_len)
        self.profile = profile
        assert self.config.max_model_len is not None
        self.max_model_len: int = self.config.max_model_len
        num_blocks = self.config.num_gpu_blocks_override or profile.num_kv_blocks(self.config)
        blocks_per_seq = -(-self.max_model_len // self.config.block_size)
        if num_blocks < blocks_per_seq:
            raise EngineConfigError(
                f"the KV cache ({num_blocks * self.config.block_size} tokens on profile "
                f"{profile.name}) cannot hold one request of --max-model-len "
                f"{self.max_model_len}; lower --max-model-len or raise "
                "--gpu-memory-utilization"
            )
        self.pool = BlockPool(num_blocks, self.config.block_size, self.config.enable_prefix_caching)
        self.scheduler = Scheduler(self.config, self.pool)
        self.requests: dict[str, EngineRequest] = {}
        self._seq = 0
        self._step: tuple[float, float, ScheduledBatch] | None = None
        self._preemptions = 0
        self._generation_tokens = 0

    @property
    def num_kv_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def step_in_flight(self) -> bool:
        return self._step is not None

    @property
    def has_unfinished(self) -> bool:
        return bool(self.requests)

    @property
    def num_preemptions(self) -> int:
        return self._preemptions

    def add_request(self, req: EngineRequest, now: float) -> None:
        """Queues a request; raises RequestRejected when it can never run."""
        if req.id in self.requests:
            raise RequestRejected(f"request id {req.id!r} is already in the engine")
        if req.prompt_tokens < 1:
            raise RequestRejected(f"request {req.id}: the prompt must have at least 1 token")
        if req.max_tokens < 1:
            raise RequestRejected(f"request {req.id}: max_tokens must be at least 1")
        if req.prompt_tokens + req.max_tokens > self.max_model_len:
            raise RequestRejected(
                f"request {req.id}: {req.prompt_tokens} prompt tokens + {req.max_tokens} "
                f"max_tokens exceed max_model_len {self.max_model_len}"
            )
        self._seq += 1
        req.seq = self._seq
        req.status = RequestStatus.WAITING
        self.requests[req.id] = req
        self.scheduler.add(req)

    def abort(self, request_id: str, now: float) -> bool:
        """Drops a request wherever it is and frees its blocks; False if unknown/done."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.remove(req)
        req.status = RequestStatus.ABORTED
        return True

    def begin_step(self, now: float) -> float | None:
        """Schedules the next batch starting at `now`; returns when it ends, or None
        when there is nothing to run."""
        if self._step is not None:
            raise RuntimeError("begin_step called while a step is in flight; call end_step")
        batch = self.scheduler.schedule(now)
        self._preemptions += len(batch.preempted)
        if not batch.entries:
            if batch.preempted:  # everything was preempted; the queue retries next step
                self._step = (now, now, batch)
                return now
            return None
        end = now + self.profile.perf.step_time(batch.shape)
        self._step = (now, end, batch)
        return end

    def end_step(self) -> StepResult:
        """Applies the step begun last: tokens out, finished requests leave."""
        if self._step is None:
            raise RuntimeError("end_step called without a step in flight")
        start, end, batch = self._step
        self._step = None
        tokens, finished = self.scheduler.apply(batch)
        for req in finished:
            del self.requests[req.id]
        self._generation_tokens += len(tokens)
        return StepResult(
            start_s=start,
            end_s=end,
            started=[r.id for r in batch.started],
            tokens=tokens,
            finished=[r.id for r in finished],
            preempted=[r.id for r in batch.preempted],
            num_prefill_tokens=batch.shape.prefill_tokens,
            num_decode_seqs=batch.shape.decode_seqs,
        )

    def run_decodes(self, now: float, until: float) -> DecodeRun | None:
        """Fast-forward for virtual time: runs, in one call, the consecutive steps from
        `now` that are pure decodes over the running requests and start before `until`
        (the next arrival), stopping where the batch could change: at the first finish
        while requests wait, or where the block pool might run short. With nothing
        waiting, a finished request just leaves the batch and the run goes on. Same state
        and times as that many begin_step/end_step pairs; None when the next step is not
        such a step."""
        return self.apply_decodes(self.plan_decodes(now, until))

    def plan_decodes(
        self, now: float, until: float, max_steps: int | None = None, to_first_finish: bool = False
    ) -> list[float]:
        """The end times of the steps `run_decodes(now, until)` would run, changing
        nothing (empty when the next step is not a pure decode): at most `max_steps`, and
        with `to_first_finish` none after the first step that finishes a request. A
        driver that may be interrupted applies a prefix with `apply_decodes`."""
        if self._step is not None:
            raise RuntimeError("plan_decodes called while a step is in flight")
        sched = self.scheduler
        if not sched.steady_decodes():
            return []
        running = sched.running
        leaving: list[tuple[int, int]] = []  # (steps left, context) of requests that leave
        if sched.waiting or to_first_finish:  # none leaves before the last step
            limit = min(r.max_tokens - r.num_output_tokens for r in running)
        else:
            leaving = sorted((r.max_tokens - r.num_output_tokens, r.num_computed_tokens)
                             for r in running)  # fmt: skip
            limit = leaving[-1][0]
        if max_steps is not None:
            limit = min(limit, max_steps)
        limit = min(limit, self._steps_with_free_blocks(limit))
        step_time = self.profile.perf.decode_step_time  # step_time(BatchShape(0, s, c, c + s))
        seqs, context = len(running), sum(r.num_computed_tokens for r in running)
        ends: list[float] = []
        t, gone, j = now, 0, 0
        while j < limit and (j == 0 or t < until):
            while leaving and leaving[gone][0] <= j:  # finished at the last step: it left
                context -= leaving[gone][1] + j
                seqs -= 1
                gone += 1
            t += step_time(seqs, context)
            ends.append(t)
            context += seqs
            j += 1
        return ends

    def _steps_with_free_blocks(self, limit: int) -> int:
        """The most steps (up to `limit`) whose new KV blocks, summed over the running
        requests, fit the free pool — so no allocation can fail inside the run."""
        pool, running = self.pool, self.scheduler.running

        def need(k: int) -> int:
            return sum(
                max(
                    0,
                    pool.blocks_for(
                        r.num_computed_tokens + min(k, r.max_tokens - r.num_output_tokens)
                    )
                    - r.num_blocks,
                )
                for r in running
            )

        free = pool.num_free
        if len(running) * (limit // pool.block_size + 1) <= free or need(limit) <= free:
            return limit
        lo, hi = 0, limit  # need(lo) fits, need(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if need(mid) <= free else (lo, mid)
        return lo

    def apply_decodes(self, ends: list[float]) -> DecodeRun | None:
        """Applies pure decode steps ending at `ends` (a prefix of `plan_decodes`, planned
        on this very state): the same state as that many begin_step/end_step pairs."""
        if not ends:
            return None
        pool, sched = self.pool, self.scheduler
        k = len(ends)
        tokens: list[tuple[str, int, int]] = []
        finished: list[str] = []
        bs, generated = pool.block_size, 0
        for r in sched.running:  # (once per request and run: attributes read once)
            out = r.num_output_tokens
            n = r.max_tokens - out
            if n > k:
                n = k
            if r.num_computed_tokens + n > r.num_blocks * bs:
                ok = pool.allocate(r, n)
                assert ok, "run_decodes checked the pool"
            r.num_computed_tokens += n
            out += n
            r.num_output_tokens = out
            generated += n
            tokens.append((r.id, n, out))
            if out >= r.max_tokens:
                r.status = RequestStatus.FINISHED
                pool.free(r)
                del self.requests[r.id]
                finished.append(r.id)
        self._generation_tokens += generated
        if finished:
            sched.running = [r for r in sched.running if r.status is RequestStatus.RUNNING]
        return DecodeRun(ends=ends, tokens=tokens, finished=finished)

    @property
    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=self.pool.usage,
            num_preemptions_total=self._preemptions,
            prompt_tokens_total=self.scheduler.prompt_tokens_total,
            generation_tokens_total=self._generation_tokens,
            prefix_cache_queries_total=self.pool.prefix_queries_tokens,
            prefix_cache_hits_total=self.pool.prefix_hits_tokens,
        )
