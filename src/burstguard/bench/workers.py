"""`bench --workers N`: N processes send one schedule, for a load one core cannot send.

There is one arrival process: the parent builds the workload once and every worker gets
all of it, sending requests k, k + N, k + 2N, ... (closed loop: users k, k + N, ...), so
the schedule is the same whatever N is. Workers start and say they are ready; once all
are, the parent stamps one origin on the shared monotonic clock, so every
record's scheduled and sent times (and the schedule lag) are on one time base. Each
worker writes its own records file; the parent merges them into records.jsonl in
schedule order, scrapes /metrics itself, shows the summed progress, and turns a SIGINT or
SIGTERM into one SIGTERM per worker (each then drains as a single process does). A retry
budget is kept per worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import signal
import time
from pathlib import Path
from typing import Any

from burstguard.bench.runner import (
    BenchConfig,
    LiveCounts,
    Reporter,
    _run,
    metrics_polling,
    new_loop,
)
from burstguard.clock import schedule_origin
from burstguard.errors import TargetError
from burstguard.scrape import MetricsPoller
from burstguard.wire.records import RecordWriter, RequestRecord, read_records
from burstguard.workload.spec import Workload

COUNTS = ("sent", "in_flight", "done", "errors", "retries")
READY_TIMEOUT_S = 120.0
"""Workers import burstguard before they are ready: ~1 s each, far more on a busy box."""


def worker_records(out_dir: Path, k: int) -> Path:
    return out_dir / f"records.w{k}.jsonl"


def _worker(
    config: BenchConfig,
    workload: Workload,
    shard: tuple[int, int],
    ready: Any,
    start: Any,
    origin: Any,
    counts: Any,
) -> None:
    """One worker process: its share of the leg, its counts published to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent forwards one SIGTERM
    k = shard[0]

    def publish(live: LiveCounts, final: bool) -> None:
        base = k * len(COUNTS)
        for i, name in enumerate(COUNTS):
            counts[base + i] = getattr(live, name)

    async def gate() -> float:
        with ready.get_lock():
            ready.value += 1
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, start.wait, READY_TIMEOUT_S):
            raise SystemExit("bench worker: the parent never gave the start")
        return float(origin.value)

    path = worker_records(config.out_dir, k)
    path.unlink(missing_ok=True)
    with RecordWriter(path) as writer, asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_run(config, workload, writer, publish, shard, gate, (signal.SIGTERM,)))


def _live(counts: Any, n: int, started_at: float) -> LiveCounts:
    live = LiveCounts(started_at=started_at)
    for i, name in enumerate(COUNTS):
        setattr(live, name, int(sum(counts[k * len(COUNTS) + i] for k in range(n))))
    return live


async def _supervise(
    config: BenchConfig,
    procs: list[Any],
    ready: Any,
    start: Any,
    origin: Any,
    counts: Any,
    reporter: Reporter | None,
) -> tuple[MetricsPoller | None, bool]:
    """The parent's side: readiness, origin, /metrics, progress, signals; until all exit."""
    loop = asyncio.get_running_loop()
    stopped = {"n": 0}

    def forward() -> None:
        stopped["n"] += 1
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: the worker stops sending and drains

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, forward)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while ready.value < len(procs):  # workers import burstguard and connect (~1 s)
            if stopped["n"]:
                return None, True
            if any(p.exitcode is not None for p in procs) or time.monotonic() > deadline:
                raise TargetError("a bench worker did not start; see its error above")
            await asyncio.sleep(0.05)
        origin.value = schedule_origin(config.start_at)
        start.set()
        async with metrics_polling(config, origin.value) as poller:
            last = 0.0
            while any(p.is_alive() for p in procs):
                now = time.monotonic()
                if reporter is not None and now - last >= 0.5:
                    reporter(_live(counts, len(procs), origin.value), False)
                    last = now
                await asyncio.sleep(0.05)
        if reporter is not None:
            reporter(_live(counts, len(procs), origin.value), True)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return poller, stopped["n"] > 0


def run_workers(
    config: BenchConfig, workload: Workload, reporter: Reporter | None
) -> tuple[list[RequestRecord], MetricsPoller | None, bool]:
    """Runs the leg in `config.workers` processes; merges their records into
    DIR/records.jsonl. Returns (records, the /metrics poller, interrupted)."""
    n = config.workers
    ctx = mp.get_context("spawn")  # no fork of a process holding BLAS threads
    ready, start = ctx.Value("i", 0), ctx.Event()
    origin = ctx.Value("d", 0.0, lock=False)
    counts = ctx.Array("d", n * len(COUNTS), lock=False)
    worker_config = dataclasses.replace(config, scrape_url=None, workers=1)
    procs = []
    for k in range(n):
        k0, machines = config.shard  # worker k of this machine's share of the schedule
        args = (worker_config, workload, (k0 + machines * k, machines * n), ready, start,
                origin, counts)  # fmt: skip
        procs.append(ctx.Process(target=_worker, name=f"bench-worker-{k}", args=args, daemon=True))
    for p in procs:
        p.start()
    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            poller, interrupted = runner.run(
                _supervise(config, procs, ready, start, origin, counts, reporter)
            )
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
    failed = [p.name for p in procs if p.exitcode not in (0, None)]
    records = merge_records(config.out_dir, n)
    if failed and not interrupted:
        raise TargetError(f"{', '.join(failed)} failed (exit {procs[0].exitcode}); records so far "
                        f"are in {config.out_dir / 'records.jsonl'}")  # fmt: skip
    return records, poller, interrupted


def merge_records(out_dir: Path, n: int) -> list[RequestRecord]:
    """The workers' records in schedule order, written to records.jsonl (theirs removed)."""
    records: list[RequestRecord] = []
    for k in range(n):
        path = worker_records(out_dir, k)
        if path.exists():
            records.extend(read_records(path))
    records.sort(key=lambda r: r.scheduled_s)
    with RecordWriter(out_dir / "records.jsonl") as writer:
        for record in records:
            writer.write(record)
    for k in range(n):
        worker_records(out_dir, k).unlink(missing_ok=True)
    return records
