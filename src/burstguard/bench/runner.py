"""The load generator: open loop at absolute scheduled times, closed loop of N users, or
the seed script's closed burst cycle (`workload.cycle`).

Open loop: every request is sent at `origin + arrival / speedup` on the monotonic clock, so
lateness never accumulates, and each record keeps its scheduled and actual send time — the
summary's `schedule_lag_s` shows when the client itself was the bottleneck (coordinated
omission) instead of silently bending the result. Closed loop: each user sends its next
request when the previous one ends (plus think time), the seed's steady baseline; users
start spread over `ramp_up_s`, else equal-length requests keep them in lock-step and the
"steady" leg is itself a train of bursts.

Times in records are in the target's time: wall seconds x `speedup` (1 for a real server;
an emulator started with `--speedup X` runs engine time X times faster). With retries,
TTFT and E2E count from the first try, as the user waiting for the answer sees them.
Records are appended as each request ends; SIGINT/SIGTERM stops sending, waits up to
`grace_s` for what is in flight (a second signal stops at once) and still summarises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import signal
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burstguard.bench import stream
from burstguard.bench.payload import Api, PayloadBuilder
from burstguard.client.retry import RetryBudget, RetryPolicy, retry_headers
from burstguard.clock import schedule_origin
from burstguard.http.client import UpstreamPool
from burstguard.scrape import MetricsPoller
from burstguard.tokenizer import PromptPieces
from burstguard.wire import headers as wire_headers
from burstguard.wire.outcomes import Outcome
from burstguard.wire.records import RecordWriter, RequestRecord
from burstguard.wire.summary import Slo
from burstguard.workload.cycle import BurstCycle, CycleSpec
from burstguard.workload.sessions import Dependencies
from burstguard.workload.spec import RequestSpec, Workload

SLEEP_SLICE_S = 0.25
"""Long waits are cut into slices so a stop signal is noticed promptly."""


@dataclass
class BenchConfig:
    """One bench leg. `concurrency` set -> closed loop for `duration_s`; `cycle` set ->
    the seed's burst cycle; else open loop."""

    target: str
    model: str
    out_dir: Path
    api: Api = "chat"
    stream: bool = True
    ignore_eos: bool = True
    send_priority: bool = False
    prompts: list[str] | None = None
    timeout_s: float | None = 600.0
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(mode="none"))
    retry_budget: float | None = None
    concurrency: int | None = None
    think_time_s: float = 0.0
    ramp_up_s: float = 0.0
    duration_s: float | None = None
    speedup: float = 1.0
    scrape_url: str | None = None
    api_key: str | None = None
    """Sent as `Authorization: Bearer` with every request (never written to the run)."""
    metrics_key: str | None = None
    """The same for the /metrics scrape (the gateway's `metrics.api_key`)."""
    slo: Slo = field(default_factory=Slo)
    drain_s: float | None = None
    grace_s: float = 5.0
    seed: int = 0
    label: str = "bench"
    cycle: CycleSpec | None = None
    workers: int = 1
    """Processes sending the one schedule, split by request index (bench/workers.py)."""
    start_at: float | None = None
    """Unix time of the schedule's zero (None: as soon as the client is ready)."""
    shard: tuple[int, int] = (0, 1)
    """(K, N): this machine sends requests K, K + N, ... of the schedule (closed loop:
    users; sessions: whole sessions); its workers split that share again."""
    prompt_pieces: PromptPieces | None = None
    """The words prompts are made of, sized in the served model's tokens where burstguard
    has its tokenizer (`tokenizer.exact_pieces`); None: the estimate's."""


@contextlib.asynccontextmanager
async def metrics_polling(
    config: BenchConfig, origin: float
) -> AsyncIterator[MetricsPoller | None]:
    """The leg's /metrics poller for the block (None without a scrape URL): one sample per
    second of the engine's time, each also a line of DIR/metrics.jsonl; its series stays
    readable after the block."""
    if not config.scrape_url:
        yield None
        return
    with (config.out_dir / "metrics.jsonl").open("w", encoding="utf-8") as sink:
        poller = MetricsPoller(
            config.scrape_url, interval_s=max(0.1, 1.0 / config.speedup), origin=origin,
            sink=sink, headers=wire_headers.bearer(config.metrics_key),
        )  # fmt: skip
        poller.start()
        try:
            yield poller
        finally:
            await poller.stop()


def _us(seconds: float) -> float:
    """Rounded to the microsecond: the clock's useful resolution, and shorter JSONL."""
    return round(seconds, 6)


@dataclass
class LiveCounts:
    """What the progress line shows; updated as requests start and end."""

    started_at: float = field(default_factory=time.monotonic)
    sent: int = 0
    in_flight: int = 0
    done: int = 0
    errors: int = 0
    retries: int = 0
    recent_ttft: list[float] = field(default_factory=list)

    def ttft_p95(self) -> float | None:
        if not self.recent_ttft:
            return None
        ordered = sorted(self.recent_ttft[-200:])
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


Reporter = Callable[[LiveCounts, bool], None]


class _Run:
    """State of one running leg (one event loop)."""

    def __init__(
        self,
        config: BenchConfig,
        writer: RecordWriter,
        reporter: Reporter | None,
        shard: tuple[int, int] = (0, 1),
    ):
        self.config = config
        self.shard = shard
        """(k, n): this process sends requests k, k + n, k + 2n, ... (closed loop: users)."""
        self.writer = writer
        self.reporter = reporter
        self.base = config.target.rstrip("/")
        self.payload = PayloadBuilder(
            config.model, config.api, config.stream, config.ignore_eos,
            config.send_priority, config.prompts, api_key=config.api_key,
        )  # fmt: skip
        self.budget = RetryBudget(ratio=config.retry_budget) if config.retry_budget else None
        self.rng = random.Random(config.seed)
        self.records: list[RequestRecord] = []
        self.live = LiveCounts()
        self.stop = asyncio.Event()
        self.abort = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.origin = 0.0
        self.client: UpstreamPool | None = None
        self.cycle: BurstCycle | None = None
        self.deps: Dependencies | None = None  # open loop over sessions
        self.workload: Workload | None = None

    # --- time -------------------------------------------------------------------------
    def target_s(self, wall: float) -> float:
        """A wall-clock instant as seconds of target time since the origin."""
        return (wall - self.origin) * self.config.speedup

    async def sleep_until(self, wall: float) -> None:
        while not self.stop.is_set():
            delay = wall - time.monotonic()
            if delay <= 0:
                return
            await asyncio.sleep(min(delay, SLEEP_SLICE_S))

    # --- one request ------------------------------------------------------------------
    async def request(self, spec: RequestSpec, index: int, scheduled_s: float) -> None:
        cfg = self.config
        path, data, headers = self.payload.encode(spec, index)
        record = RequestRecord(
            id=spec.id, scheduled_s=scheduled_s,
            priority_class=spec.priority_class, tenant=spec.tenant,
        )  # fmt: skip
        self.live.sent += 1
        self.live.in_flight += 1
        if self.budget is not None:
            self.budget.on_request()
        first: float | None = None
        try:
            while True:
                assert self.client is not None
                attempt = await stream.send(
                    self.client, path, data, {**headers, **retry_headers(record.retries)},
                    stream=cfg.stream, timeout_s=cfg.timeout_s,
                )  # fmt: skip
                if first is None:
                    first = attempt.started
                    record.sent_s = _us(self.target_s(first))
                self._fill(record, attempt, first)
                if attempt.ok:
                    break
                if attempt.retry_after_s is not None:
                    record.retry_after_s = attempt.retry_after_s
                http = attempt.error is not None and attempt.error.startswith("http_")
                decision = cfg.retry.decide(
                    record.retries, status=attempt.status if http else None,
                    error=attempt.error, retry_after_s=attempt.retry_after_s,
                    budget=self.budget, rng=self.rng,
                )  # fmt: skip
                if not decision.retry or self.stop.is_set():
                    break
                record.attempts.append(
                    {"sent_s": self.target_s(attempt.started), "status": attempt.status,
                     "error": attempt.error, "retry_after_s": attempt.retry_after_s,
                     "delay_s": decision.delay_s, "detail": attempt.detail,
                     "retry_s": _us(self.target_s(time.monotonic() + decision.delay_s))}
                )  # fmt: skip
                record.retries += 1
                self.live.retries += 1
                await asyncio.sleep(decision.delay_s)
        except asyncio.CancelledError:
            record.error = Outcome.CANCELLED
            raise
        finally:
            if record.sent_s is None and first is None and record.error is None:
                record.error = Outcome.CANCELLED
            self._finish(record)
            if self.deps is not None and record.error != Outcome.CANCELLED:
                self._release(index)

    def _release(self, index: int) -> None:
        """Request `index` of a session workload ended: send what waited for it, at its
        time (`Dependencies.ended`: think time after the last predecessor's end)."""
        assert self.deps is not None and self.workload is not None
        if self.stop.is_set():
            return
        for j, at in self.deps.ended(index, self.target_s(time.monotonic())):
            self.spawn_user(self._later(self.workload.spec(j), j, at))

    async def _later(self, spec: RequestSpec, index: int, at: float) -> None:
        await self.sleep_until(self.origin + at / self.config.speedup)
        if not self.stop.is_set():
            await self.request(spec, index, at)

    def _fill(self, record: RequestRecord, attempt: stream.Attempt, first: float) -> None:
        k = self.config.speedup
        offset = attempt.started - first
        record.status = attempt.status
        record.error = attempt.error
        record.error_code = attempt.error_code
        record.ttft_s = None if attempt.ttft_s is None else _us((offset + attempt.ttft_s) * k)
        record.e2e_s = None if attempt.e2e_s is None else _us((offset + attempt.e2e_s) * k)
        record.itl_s = [round(x * k, 6) for x in attempt.itl_s]
        record.prompt_tokens = attempt.prompt_tokens
        record.completion_tokens = attempt.completion_tokens

    def _finish(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.writer.write(record)
        self.live.in_flight -= 1
        self.live.done += 1
        if not record.ok:
            self.live.errors += 1
        elif record.ttft_s is not None:
            self.live.recent_ttft.append(record.ttft_s)
            if len(self.live.recent_ttft) > 400:
                del self.live.recent_ttft[:200]

    def spawn(self, spec: RequestSpec, index: int, scheduled_s: float) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self.request(spec, index, scheduled_s))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # --- loops ------------------------------------------------------------------------
    async def open_loop(self, workload: Workload, end_s: float | None) -> None:
        """Each request at its arrival; in a session workload only the sessions' first
        requests (those of this shard's sessions), the rest as their predecessors end,
        until every session is done."""
        k = self.config.speedup
        arrivals = workload.arrival_s
        k0, step = self.shard
        self.deps = Dependencies.of(workload)
        self.workload = workload
        order = range(k0, len(workload), step) if self.deps is None else self.deps.mine(self.shard)
        for i in order:
            at = float(arrivals[i])
            if end_s is not None and at > end_s:
                break
            await self.sleep_until(self.origin + at / k)
            if self.stop.is_set():
                break
            self.spawn(workload.spec(i), i, at)
        while self.deps is not None and self.tasks and not self.stop.is_set():
            await asyncio.sleep(0.05)  # sessions go on past the last first turn

    async def closed_loop(self, workload: Workload, users: int, duration_s: float) -> None:
        k = self.config.speedup
        end = self.origin + duration_s / k
        k0, step = self.shard
        counter = iter(range(k0, 1 << 62, step))

        def next_spec() -> tuple[int, RequestSpec]:
            n = next(counter)
            spec = workload.spec(n % len(workload))
            return n, dataclasses.replace(spec, id=f"c{n}")

        async def user(start_wall: float) -> None:
            await self.sleep_until(start_wall)
            while not self.stop.is_set() and time.monotonic() < end:
                n, spec = next_spec()
                await self.request(spec, n, self.target_s(time.monotonic()))
                if self.config.think_time_s > 0:
                    await self.sleep_until(time.monotonic() + self.config.think_time_s / k)

        ramp = self.config.ramp_up_s / k
        for u in range(k0, users, step):
            self.spawn_user(user(self.origin + ramp * u / users))
        while self.tasks and not self.stop.is_set() and time.monotonic() < end:
            await asyncio.sleep(min(SLEEP_SLICE_S, max(0.0, end - time.monotonic())))

    async def burst_cycle(self, workload: Workload, cycle: BurstCycle) -> None:
        """A burst at once, wait until all of it has finished, idle, the next burst."""
        k = self.config.speedup
        n = 0
        burst = cycle.first()
        while burst is not None:
            await self.sleep_until(self.origin + burst.start_s / k)
            if self.stop.is_set():
                break
            pending = set()
            for i in range(burst.size):
                spec = dataclasses.replace(
                    workload.spec(n % len(workload)), id=f"b{burst.index}-{i}"
                )
                pending.add(self.spawn(spec, n, burst.start_s))
                n += 1
            while pending and not self.stop.is_set():
                _, pending = await asyncio.wait(pending, timeout=SLEEP_SLICE_S)
            if self.stop.is_set():
                break
            burst = cycle.next(self.target_s(time.monotonic()))

    def spawn_user(self, user: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(user)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        """Waits for in-flight requests (drain_s, or grace_s after a stop); then cancels."""
        cfg = self.config
        limit = cfg.grace_s if self.stop.is_set() else (cfg.drain_s or cfg.timeout_s or 600.0)
        deadline = time.monotonic() + limit
        while self.tasks and not self.abort.is_set():
            if self.stop.is_set():
                deadline = min(deadline, time.monotonic() + cfg.grace_s)
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def on_signal(self) -> None:
        if self.stop.is_set():
            self.abort.set()
        self.stop.set()

    async def progress(self) -> None:
        if self.reporter is None:
            return
        while True:
            self.reporter(self.live, False)
            await asyncio.sleep(0.5)


async def _run(
    config: BenchConfig,
    workload: Workload,
    writer: RecordWriter,
    reporter: Reporter | None,
    shard: tuple[int, int] = (0, 1),
    start_gate: Callable[[], Coroutine[Any, Any, float]] | None = None,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> tuple[_Run, MetricsPoller | None, bool]:
    """One process's leg. `start_gate`, for a worker: awaited once connected, it returns
    the origin all workers share."""
    run = _Run(config, writer, reporter, shard)
    run.payload.prefix_block_tokens = workload.prefix_block_tokens
    if config.prompt_pieces is not None:
        run.payload.pieces = config.prompt_pieces.pieces
    run.payload.slo_ms = (config.slo.ttft_s * 1000, config.slo.tpot_s * 1000)
    cycle = BurstCycle(config.cycle) if config.cycle is not None else None
    run.cycle = cycle
    loop = asyncio.get_running_loop()
    installed = []
    for sig in signals:
        try:
            loop.add_signal_handler(sig, run.on_signal)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    run.client = stream.new_client(run.base, config.timeout_s)
    run.origin = schedule_origin(config.start_at) if start_gate is None else await start_gate()
    run.live.started_at = run.origin
    progress = loop.create_task(run.progress())
    try:
        async with metrics_polling(config, run.origin) as poller:
            if cycle is not None:
                await run.burst_cycle(workload, cycle)
            elif config.concurrency:
                await run.closed_loop(workload, config.concurrency, config.duration_s or 60.0)
            else:
                await run.open_loop(workload, config.duration_s)
            await run.drain()
    finally:
        progress.cancel()
        run.client.close()
        for sig in installed:
            loop.remove_signal_handler(sig)
        if reporter is not None:
            reporter(run.live, True)
    return run, poller, run.stop.is_set()


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
