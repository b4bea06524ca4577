"""A local fleet: the scaling core on the real clock, carried out on real emulator
processes, published to the gateway through a watched backend file.

What a cluster does around a Deployment, on one machine:
- the policy (`ScalingController`, the simulator's core) reads the gateway's /metrics
  (polled as Prometheus would scrape it) and decides right after each scrape that finds
  it due (on fresh samples, as the simulator's ticks read exact ones; a controller on its
  own timer would decide on samples up to a scrape old);
- a new replica is an emulator process started at once, but it joins the backend file
  (the gateway's `fleet.discovery.file`) only after the modelled cold start has passed
  and its /health answers: image pull, weight load and graph capture, simulated;
- a replica scaled away leaves the file (the gateway drains it: no new requests), and is
  stopped once its own /metrics shows nothing running or waiting, or at the grace period.
Times are engine seconds (wall x `speedup`), as in the simulator and the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from burstguard.autoscale.config import ScalingPolicy
from burstguard.autoscale.fleet import (
    DrainReplica,
    FleetEffect,
    ReplicaReady,
    StartReplica,
    StopReplica,
)
from burstguard.autoscale.live import LiveScaler
from burstguard.autoscale.signals import SIGNAL_NAMES
from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import metric_sum, parse_metrics

__all__ = ["LocalFleet", "write_backend_file"]

log = logging.getLogger("burstguard.fleet")

POLL_S = 0.5  # wall seconds between scrapes of the gateway (and of a draining replica)
DRAIN_GRACE_S = 1.5  # wall seconds for the gateway to read the file before drain checks


def write_backend_file(path: Path, urls: Sequence[str]) -> None:
    """The backend list, replaced atomically (the discovery watcher sees a new inode)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{u}\n" for u in urls), encoding="utf-8")
    os.replace(tmp, path)


class LocalFleet:
    """Emulator replicas sized by `policy` from the signals at `gateway_url`/metrics."""

    def __init__(
        self,
        policy: ScalingPolicy,
        backend_file: Path,
        gateway_url: str,
        emulator_argv: Callable[[int], list[str]],
        *,
        speedup: float = 1.0,
        initial_replicas: int | None = None,
        log_dir: Path | None = None,
        seed: int = 0,
    ) -> None:
        self.backend_file = backend_file
        self.gateway_url = gateway_url.rstrip("/")
        self._argv = emulator_argv
        self.speedup = speedup
        self._t0 = time.monotonic()
        self.controller = policy.build_controller(
            initial_replicas=initial_replicas, seed=seed, start=0.0, auto_ready=False
        )
        self.scaler = LiveScaler(
            self.controller, self.now, self.signals, self._on_effects, speedup=speedup
        )
        self.log_dir = log_dir
        self._procs: dict[int, ManagedProcess] = {}
        self._urls: dict[int, str] = {}
        self._listed: list[int] = []  # replicas in the backend file
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._signals: dict[str, float] = dict.fromkeys(SIGNAL_NAMES, 0.0)
        self._session: aiohttp.ClientSession | None = None
        self._stopping: set[asyncio.Future[None]] = set()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Ends `run` now (SIGTERM, SIGINT): the books are still returned."""
        self._stop.set()

    def now(self) -> float:
        """Engine seconds since the fleet started."""
        return (time.monotonic() - self._t0) * self.speedup

    def signals(self) -> dict[str, float]:
        return dict(self._signals)

    # -- running ------------------------------------------------------------------------

    async def run(self, duration_s: float | None = None) -> dict[str, Any]:
        """Starts the initial replicas, scales until `duration_s` (wall) or `stop()`,
        stops every process; returns the controller's books at the end."""
        self._session = aiohttp.ClientSession()
        try:
            initial = self.controller.fleet.ids("ready")
            await asyncio.gather(*(self._start_process(rid) for rid in initial))
            self._listed = list(initial)
            self._publish()
            self._t0 = time.monotonic()  # the clock starts when the fleet serves
            poller = asyncio.ensure_future(self._poll_gateway())
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), duration_s)
            finally:
                for task in (poller, *self._tasks.values()):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            return self.controller.report(self.now())
        finally:
            await asyncio.gather(*self._stopping, return_exceptions=True)
            await asyncio.to_thread(self._stop_all)
            await self._session.close()

    async def _poll_gateway(self) -> None:
        assert self._session is not None
        while True:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._session.get(
                    f"{self.gateway_url}/metrics", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    samples = parse_metrics(await resp.text(), SIGNAL_NAMES)
                for name in SIGNAL_NAMES:
                    self._signals[name] = metric_sum(samples, name) or 0.0
            if self.now() >= self.controller.next_event_at():
                try:
                    self.scaler.step()
                except Exception:
                    log.exception("autoscaler step failed")
            await asyncio.sleep(POLL_S)

    # -- effects --------------------------------------------------------------------------

    def _on_effects(self, effects: list[FleetEffect], now: float) -> None:
        for e in effects:
            if isinstance(e, StartReplica):
                self._tasks[e.replica_id] = asyncio.ensure_future(self._cold_start(e))
            elif isinstance(e, ReplicaReady):
                self._listed.append(e.replica_id)
                self._publish()
                log.info("replica %d ready at %s", e.replica_id, self._urls[e.replica_id])
            elif isinstance(e, DrainReplica):
                if e.replica_id in self._listed:
                    self._listed.remove(e.replica_id)
                self._publish()
                self._tasks[e.replica_id] = asyncio.ensure_future(self._drain(e))
            elif isinstance(e, StopReplica):
                task = self._tasks.pop(e.replica_id, None)
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
                proc = self._procs.pop(e.replica_id, None)
                if proc is not None:  # SIGTERM, then SIGKILL after a grace: off the loop
                    self._stopping.add(asyncio.ensure_future(asyncio.to_thread(proc.stop)))
                log.info("replica %d stopped (%s)", e.replica_id, e.reason)

    async def _cold_start(self, e: StartReplica) -> None:
        """The process starts now; it serves from the modelled ready time (or when its
        /health first answers, if later)."""
        await self._start_process(e.replica_id)
        await asyncio.sleep(max(e.ready_at - self.now(), 0.0) / self.speedup)
        self._on_effects(self.controller.mark_ready(e.replica_id, self.now()), self.now())

    async def _drain(self, e: DrainReplica) -> None:
        """Stopped when nothing runs or waits on it any more, or at its deadline."""
        await asyncio.sleep(DRAIN_GRACE_S)
        url = self._urls[e.replica_id]
        assert self._session is not None
        while self.now() < e.deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._session.get(
                    f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    samples = parse_metrics(await resp.text())
                busy = sum(
                    metric_sum(samples, n) or 0.0
                    for n in ("vllm:num_requests_running", "vllm:num_requests_waiting")
                )
                if busy == 0:
                    self._on_effects(self.controller.drained(e.replica_id, self.now()), self.now())
                    return
            await asyncio.sleep(POLL_S)
        # past the deadline the controller stops it (drain_timeout) at its next step

    async def _start_process(self, rid: int) -> None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = self.log_dir / f"replica-{rid}.log" if self.log_dir else None
        proc = ManagedProcess(self._argv(port), f"{url}/health", log_path=log_path)
        self._procs[rid], self._urls[rid] = proc, url
        await asyncio.to_thread(proc.start)

    def _publish(self) -> None:
        write_backend_file(self.backend_file, [self._urls[r] for r in self._listed])

    def _stop_all(self) -> None:
        for proc in self._procs.values():
            proc.stop()
        self._procs.clear()
