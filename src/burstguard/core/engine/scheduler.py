"""The continuous-batching scheduler, with vLLM V1's semantics.

Each step has a token budget (`max_num_batched_tokens`). Running requests are served
first, in admission order: a decode takes one token, an unfinished (chunked) prefill takes
what is left of the budget. When a running request needs a KV block and the pool is
empty, the scheduler preempts by recompute — FCFS: the most recently admitted running
request; priority: the lowest priority (highest value), latest arrival — frees its blocks
and puts it back in the waiting queue. Only when nothing was preempted does it admit
waiting requests, in queue order, while `max_num_seqs`, the budget and the pool allow.
Without chunked prefill a prompt must fit the remaining budget whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.kv_cache import BlockPool
from burstguard.core.engine.perf_model import BatchShape
from burstguard.core.engine.queue import create_queue
from burstguard.core.engine.request import EngineRequest, RequestStatus


@dataclass(slots=True, init=False)  # (init=False: see `BatchShape`)
class ScheduledBatch:
    """One step's decisions: (request, tokens to compute) pairs and who was preempted."""

    entries: list[tuple[EngineRequest, int]]
    started: list[EngineRequest]
    preempted: list[EngineRequest]
    shape: BatchShape

    def __init__(
        self,
        entries: list[tuple[EngineRequest, int]] | None = None,
        started: list[EngineRequest] | None = None,
        preempted: list[EngineRequest] | None = None,
        shape: BatchShape | None = None,
    ) -> None:
        self.entries = [] if entries is None else entries
        self.started = [] if started is None else started
        self.preempted = [] if preempted is None else preempted
        self.shape = BatchShape(0, 0, 0, 0) if shape is None else shape

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(n for _, n in self.entries)


class Scheduler:
    """Waiting queue + running list + block pool -> a batch per step."""

    def __init__(self, config: EngineConfig, pool: BlockPool) -> None:
        self.config = config
        self.pool = pool
        self.waiting = create_queue(config.scheduling_policy)
        self.running: list[EngineRequest] = []
        self._priority = config.scheduling_policy == "priority"
        self.prompt_tokens_total = 0  # prompts of requests that produced their first token

    def add(self, req: EngineRequest) -> None:
        self.waiting.add(req)

    def remove(self, req: EngineRequest) -> None:
        """Takes a request out of whichever queue holds it and frees its blocks."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.pool.free(req)

    def _victim(self) -> EngineRequest:
        if self._priority:
            return max(self.running, key=lambda r: (r.priority, r.arrival_s, r.seq))
        return self.running[-1]

    def _preempt(self, victim: EngineRequest) -> None:
        self.running.remove(victim)
        self.pool.free(victim)
        victim.status = RequestStatus.WAITING
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.waiting.prepend(victim)

    def schedule(self, now: float) -> ScheduledBatch:
        budget = self.config.max_num_batched_tokens
        pool = self.pool
        bs = pool.block_size
        scheduled: dict[EngineRequest, int] = {}
        preempted: list[EngineRequest] = []
        running = self.running
        caching = pool.enable_prefix_caching
        i = 0
        while i < len(running) and budget > 0:  # (the hot loop: attributes read once)
            req = running[i]
            done = req.num_computed_tokens
            num_new = req.prompt_tokens + req.num_output_tokens - done
            if num_new > budget:
                num_new = budget
            if num_new <= 0:
                i += 1
                continue
            if done + num_new > req.num_blocks * bs:
                preempted_self = False
                while not pool.allocate(req, num_new):
                    victim = self._victim()
                    victim_index = running.index(victim)
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim in scheduled:
                        budget += scheduled.pop(victim)
                    if victim is req:
                        preempted_self = True
                        break
                    if victim_index < i:
                        i -= 1
                if preempted_self:
                    continue  # running[i] is now the next request
            scheduled[req] = num_new
            budget -= num_new
            if caching:
                pool.register_full_blocks(req, done + num_new)
            i += 1
        started: list[EngineRequest] = []
        if not preempted:
            self._admit(scheduled, started, budget, now)
        return ScheduledBatch(
            entries=list(scheduled.items()),
            started=started,
            preempted=preempted,
            shape=_shape(scheduled, started),
        )

    def _admit(
        self,
        scheduled: dict[EngineRequest, int],
        started: list[EngineRequest],
        budget: int,
        now: float,
    ) -> None:
        chunked = self.config.enable_chunked_prefill
        max_seqs = self.config.max_num_seqs
        waiting, pool = self.waiting, self.pool
        while waiting and budget > 0 and len(self.running) < max_seqs:
            req = waiting.peek()
            hits = pool.cached_prefix(req)
            num_new = req.num_tokens - req.num_computed_tokens - len(hits) * pool.block_size
            if not chunked and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not pool.allocate(req, num_new, hits):
                break
            if pool.enable_prefix_caching:
                pool.count_prefix_query(req, len(hits))
                pool.register_full_blocks(req, req.num_computed_tokens + num_new)
            waiting.pop()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
                started.append(req)
            scheduled[req] = num_new
            budget -= num_new

    def steady_decodes(self) -> bool:
        """True when the next steps are certain to be pure decode steps over exactly the
        running requests, until one of them finishes: every running request decodes,
        nothing can be admitted (the queue is empty, or max_num_seqs is reached) and no
        prefix cache needs per-step block registration. The simulator fast-forwards such
        steps (`EngineCore.run_decodes`)."""
        running = self.running
        if not running or self.pool.enable_prefix_caching:
            return False
        if len(running) > self.config.max_num_batched_tokens:
            return False
        if self.waiting and len(running) < self.config.max_num_seqs:
            return False
        return all(
            r.num_output_tokens
            and r.num_computed_tokens == r.prompt_tokens + r.num_output_tokens - 1
            for r in running
        )

    def apply(self, batch: ScheduledBatch) -> tuple[list[tuple[str, int]], list[EngineRequest]]:
        """Advances the scheduled requests by one step: returns the (id, tokens so far)
        of each request that produced a token, and the requests that finished."""
        tokens: list[tuple[str, int]] = []
        finished: list[EngineRequest] = []
        pool = self.pool
        running_status = RequestStatus.RUNNING
        for req, num_new in batch.entries:
            if req.status is not running_status:
                continue  # aborted while the step ran
            computed = req.num_computed_tokens + num_new
            req.num_computed_tokens = computed
            out = req.num_output_tokens
            if computed >= req.prompt_tokens + out:
                out += 1
                req.num_output_tokens = out
                if out == 1:
                    self.prompt_tokens_total += req.prompt_tokens
                tokens.append((req.id, out))
                if out >= req.max_tokens:
                    req.status = RequestStatus.FINISHED
                    pool.free(req)
                    finished.append(req)
        if finished:
            self.running = [r for r in self.running if r.status is running_status]
        return tokens, finished


def _shape(scheduled: dict[EngineRequest, int], started: list[EngineRequest]) -> BatchShape:
    """The step's shape. A prefix-cache hit is context (its KV is read, not computed); a
    request counts as a new prefill in its first step, hit or not (the per-request cost)."""
    first = {id(r) for r in started}
    prefill = decode = context = pairs = prefill_seqs = 0
    for req, n in scheduled.items():
        done, out = req.num_computed_tokens, req.num_output_tokens
        context += done
        if n == 1 and out and done == req.prompt_tokens + out - 1:
            decode += 1
            pairs += done + 1
        else:
            prefill += n
            prefill_seqs += done == 0 or id(req) in first  # a recompute starts over
            pairs += n * done + n * (n + 1) // 2
    return BatchShape(prefill, decode, context, pairs, prefill_seqs)
