"""The asyncio shell that drives the pure engine core with the real clock.

Engine time runs `speedup` times faster than wall time. One loop task runs steps back to
back: begin_step -> sleep until the step's end in wall time -> end_step -> deliver tokens
to per-request queues. Engine time is pegged to the steps' own end times while the engine
is busy, so timer overshoot (an asyncio sleep's resolution is coarser than a decode step's
wall time at a high speedup) does not stretch steps: a late wake-up is caught up by running the
next step without sleeping. Arrivals and aborts are queued and applied between steps, so
the core only ever sees events at times no earlier than its last step, as in the simulator.

When the host cannot keep up (Python delivering one SSE chunk per token per stream; at a
high speedup a decode step is a fraction of a millisecond of wall time), tokens reach the
clients later than engine time says. That lag is observed per step in engine seconds
(`burstguard_emulator_lag_seconds`) and warned about once on stderr, since every latency
a client measures then includes it: the cure is a lower --speedup.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from burstguard.emulator.metrics import EmulatorMetrics
from burstguard.engine.core import EngineCore, EngineRequest, RequestRejected, StepResult

FINISHED = None
"""Queue item that ends a request's token stream."""
LAG_WARNING_S = 0.25
"""Engine seconds of delivery lag that earn the one-time warning."""


@dataclass(slots=True, eq=False)
class RequestHandle:
    """One request's life in the driver; its queue carries new-token counts, then None."""

    id: str
    prompt_tokens: int
    max_tokens: int
    output_tokens: int
    priority: int
    arrival_s: float
    prefix_hashes: tuple[int, ...] = ()
    queue: asyncio.Queue[int | RequestRejected | None] = field(default_factory=asyncio.Queue)
    scheduled_s: float | None = None
    produced: int = 0
    last_token_s: float = 0.0
    done: bool = False

    @property
    def finish_reason(self) -> str:
        return "length" if self.output_tokens >= self.max_tokens else "stop"


class EngineDriver:
    def __init__(
        self,
        core: EngineCore,
        metrics: EmulatorMetrics,
        *,
        speedup: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.core = core
        self.metrics = metrics
        self.speedup = speedup
        self._clock = clock
        self._t0 = clock()
        self._engine_s = 0.0  # engine time of the end of the last step (or last idle wake)
        self._handles: dict[str, RequestHandle] = {}
        self._arrivals: list[RequestHandle] = []
        self._aborts: list[str] = []
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._lag_warned = False

    def engine_now(self) -> float:
        """Engine seconds since start: wall time since start x speedup."""
        return (self._clock() - self._t0) * self.speedup

    def submit(
        self,
        prompt_tokens: int,
        max_tokens: int,
        output_tokens: int,
        priority: int = 0,
        prefix_hashes: tuple[int, ...] = (),
    ) -> RequestHandle:
        """Queues a request for the next step; its tokens arrive on `handle.queue`.
        `prefix_hashes`: its prompt's block hashes, for the engine's prefix cache."""
        handle = RequestHandle(
            id=f"req-{next(self._ids)}",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            output_tokens=output_tokens,
            priority=priority,
            arrival_s=max(self.engine_now(), self._engine_s),
            prefix_hashes=prefix_hashes,
        )
        self._arrivals.append(handle)
        self._wake.set()
        return handle

    def abort(self, handle: RequestHandle) -> None:
        """The client went away: free the request's blocks before the next step."""
        if handle.done:
            return
        handle.done = True
        self.metrics.aborted.inc()
        self._aborts.append(handle.id)
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _apply_events(self) -> None:
        core = self.core
        if self._aborts:
            aborts, self._aborts = self._aborts, []
            for request_id in aborts:
                if self._handles.pop(request_id, None) is not None:
                    core.abort(request_id, self._engine_s)
        if self._arrivals:
            arrivals, self._arrivals = self._arrivals, []
            for handle in arrivals:
                if handle.done:  # aborted before it reached the engine
                    continue
                self._engine_s = max(self._engine_s, handle.arrival_s)
                request = EngineRequest(
                    handle.id,
                    handle.prompt_tokens,
                    handle.output_tokens,
                    handle.arrival_s,
                    priority=handle.priority,
                    prefix_hashes=handle.prefix_hashes,
                )
                try:
                    core.add_request(request, handle.arrival_s)
                except RequestRejected as exc:
                    handle.done = True
                    handle.queue.put_nowait(exc)
                    continue
                self._handles[handle.id] = handle

    async def _run(self) -> None:
        core = self.core
        while True:
            self._apply_events()
            end_s = core.begin_step(self._engine_s)
            if end_s is None:
                self._wake.clear()
                await self._wake.wait()
                self._engine_s = max(self._engine_s, self.engine_now())
                continue
            ahead_s = (end_s - self.engine_now()) / self.speedup
            await asyncio.sleep(ahead_s if ahead_s > 0 else 0)
            result = core.end_step()
            self._engine_s = max(self._engine_s, end_s)
            self._deliver(result)
            self._observe_lag(self.engine_now() - end_s)

    def _observe_lag(self, lag_s: float) -> None:
        self.metrics.lag.observe(max(0.0, lag_s))
        if lag_s > LAG_WARNING_S and not self._lag_warned:
            self._lag_warned = True
            print(
                f"burstguard emulate: warning: tokens reach clients {lag_s:.2f} s (engine "
                f"time) late; this host cannot keep up with --speedup {self.speedup:g} at "
                "this load, so measured latencies include the lag "
                "(burstguard_emulator_lag_seconds); lower --speedup",
                file=sys.stderr,
                flush=True,
            )

    def _deliver(self, result: StepResult) -> None:
        handles = self._handles
        metrics = self.metrics
        for request_id in result.started:
            handle = handles.get(request_id)
            if handle is not None and handle.scheduled_s is None:
                handle.scheduled_s = result.start_s
        metrics.step_tokens.observe(result.num_prefill_tokens + result.num_decode_seqs)
        t = result.end_s
        for request_id, produced in result.tokens:
            handle = handles.get(request_id)
            if handle is None or produced <= handle.produced:
                continue
            if handle.produced == 0:
                metrics.ttft.observe(t - handle.arrival_s)
            else:
                metrics.itl.observe(t - handle.last_token_s)
            handle.queue.put_nowait(produced - handle.produced)
            handle.produced = produced
            handle.last_token_s = t
        for request_id in result.finished:
            handle = handles.pop(request_id, None)
            if handle is None:
                continue
            handle.done = True
            metrics.e2e.observe(t - handle.arrival_s)
            scheduled_s = handle.scheduled_s if handle.scheduled_s is not None else t
            metrics.queue_time.observe(max(0.0, scheduled_s - handle.arrival_s))
            metrics.request_success(handle.finish_reason)
            handle.queue.put_nowait(FINISHED)
