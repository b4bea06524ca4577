"""EngineCore: the engine as a pure state machine driven by timestamps.

It never reads a clock and never awaits: a driver calls `begin_step(now)`, waits (real
time in the emulator, virtual time in the simulator) until the returned end time, then
calls `end_step()`. Requests may be added or aborted while a step runs; they take effect
at the next step (an abort frees the request's blocks at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from burstguard.engine.config import EngineConfig, EngineConfigError
from burstguard.engine.kv_cache import BlockPool
from burstguard.engine.profile import Profile
from burstguard.engine.request import EngineRequest, RequestStatus
from burstguard.engine.scheduler import ScheduledBatch, Scheduler

__all__ = [
    "EngineCore",
    "EngineRequest",
    "EngineStats",
    "RequestRejected",
    "StepResult",
]


class RequestRejected(ValueError):
    """The request can never run here (too long for max_model_len, or malformed)."""


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Gauges and counters with the meaning of vLLM's /metrics of the same names."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int


@dataclass(slots=True)
class StepResult:
    """What one step did. `tokens`: (request id, output tokens so far) for each request
    that produced a token at `end_s`; `started`: requests scheduled for the first time."""

    start_s: float
    end_s: float
    started: list[str] = field(default_factory=list)
    tokens: list[tuple[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_seqs: int = 0


class EngineCore:
    """One engine replica: scheduler, KV block pool and step-time model."""

    def __init__(self, config: EngineConfig, profile: Profile) -> None:
        self.config = config.resolved(profile.max_model_len)
        self.profile = profile
        assert self.config.max_model_len is not None
        self.max_model_len: int = self.config.max_model_len
        num_blocks = profile.num_kv_blocks(self.config)
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

    @property
    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=self.pool.usage,
            num_preemptions_total=self._preemptions,
            prompt_tokens_total=self.scheduler.prompt_tokens_total,
            generation_tokens_total=self._generation_tokens,
        )
