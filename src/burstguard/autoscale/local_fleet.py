"""A local fleet: the scaling core on the real clock, carried out on real emulator
processes, published to the gateway through a watched backend file.

What a cluster does around a Deployment, on one machine:
- the policy (`ScalingController`, the simulator's core) decides at its own due times in
  engine seconds (`LiveScaler.run`), each time on a scrape of the gateway's /metrics taken
  right then: the times and the samples the simulator's ticks get, at any speedup (a
  scrape on a wall-clock period would put the decisions, and the policy's rate bins, on a
  grid that moves with the speedup);
- a new replica is an emulator process that joins the backend file (the gateway's
  `fleet.discovery.file`) once the modelled cold start has passed: image pull, weight load
  and graph capture, simulated. The process itself comes from `spares` kept started,
  warmed by one request and unlisted, so the wait is the modelled one, not a Python
  process's start (seconds of wall time on a busy machine: tens of engine seconds at a
  high speedup); without a spare it is started then, and joins when it has answered its
  warm-up request, if that is later;
- a replica scaled away leaves the file (the gateway drains it: no new requests), and is
  stopped once its own /metrics shows nothing running or waiting, or at the grace period.
Times are engine seconds (wall x `speedup`) from `origin` (a shared instant, so that a
bench client's workload times and the fleet's name the same moments), as in the simulator
and the gateway.
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
from burstguard.autoscale.live import LiveScaler, aligned
from burstguard.autoscale.signals import SIGNAL_NAMES
from burstguard.errors import BurstguardError
from burstguard.http.preflight import served_models
from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import metric_sum, parse_metrics

__all__ = ["LocalFleet", "write_backend_file"]

log = logging.getLogger("burstguard.fleet")

SCRAPE_TIMEOUT_S = 2.0  # wall seconds
DRAIN_POLL_S = 0.1  # wall seconds between scrapes of a draining replica
DRAIN_GRACE_S = 1.5  # wall seconds for the gateway to re-read the file (its own wall timer)
GATEWAY_START_S = 30.0
"""Wall seconds a gateway may take to answer first: it starts after its fleet, whose
backend file it reads, so silence before then is no outage (a run that ends without it
ever answering says so)."""


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
        origin: float | None = None,
        spares: int = 0,
    ) -> None:
        """`origin`: engine time zero on the monotonic clock (None: when the initial
        replicas serve); `spares`: emulator processes kept started for scale-ups."""
        if spares < 0:
            raise ValueError("spares must be >= 0")
        self.backend_file = backend_file
        self.gateway_url = gateway_url.rstrip("/")
        self._argv = emulator_argv
        self.speedup = speedup
        self._origin = origin
        self._t0 = time.monotonic() if origin is None else origin
        self.spares = spares
        self.controller = policy.build_controller(
            initial_replicas=initial_replicas, seed=seed, start=0.0, auto_ready=False
        )
        self.scaler = LiveScaler(
            self.controller, self.now, self.signals, self._on_effects, speedup=speedup
        )
        self.log_dir = log_dir
        self._procs: dict[int, ManagedProcess] = {}
        self._urls: dict[int, str] = {}
        self._spares: list[tuple[ManagedProcess, str]] = []  # started, healthy, unlisted
        self._every: list[ManagedProcess] = []  # every process started: stopped at the end
        self._launched = 0
        self._refills: set[asyncio.Future[None]] = set()  # spares being started
        self._listed: list[int] = []  # replicas in the backend file
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._signals: dict[str, float] = dict.fromkeys(SIGNAL_NAMES, 0.0)
        self._gateway_unreachable = False
        self._gateway_seen = False  # it has answered once: later failures are outages
        self._gateway_error = ""  # why it has not answered yet
        self._started = time.monotonic()
        self._session: aiohttp.ClientSession | None = None
        self._stopping: set[asyncio.Future[None]] = set()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Ends `run` now (SIGTERM, SIGINT): the books are still returned."""
        self._stop.set()

    def now(self) -> float:
        """Engine seconds since the origin."""
        return (time.monotonic() - self._t0) * self.speedup

    def signals(self) -> dict[str, float]:
        return dict(self._signals)

    # -- running ------------------------------------------------------------------------

    async def run(self, duration_s: float | None = None) -> dict[str, Any]:
        """Starts the initial replicas and the spares, scales from the origin until
        `duration_s` (wall) after it or `stop()`, stops every process; returns the
        controller's books at the end."""
        self._session = aiohttp.ClientSession()
        try:
            initial = self.controller.fleet.ids("ready")
            await asyncio.gather(
                *(self._take_process(rid) for rid in initial),
                *(self._add_spare() for _ in range(self.spares)),
            )
            self._listed = list(initial)
            self._publish()
            if self._origin is None:
                self._t0 = time.monotonic()  # the clock starts when the fleet serves
            scaler = asyncio.ensure_future(self.scaler.run(self.scrape_gateway))
            if duration_s is not None:
                duration_s += max(self._t0 - time.monotonic(), 0.0)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), duration_s)
            finally:
                for task in (scaler, *self._tasks.values()):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if not self._gateway_seen and not self._gateway_unreachable:
                log.warning(
                    "gateway %s/metrics unreachable for the whole run (%s): the policy saw "
                    "no load", self.gateway_url, self._gateway_error,
                )  # fmt: skip
            return self.controller.report(self.now())
        finally:
            # a spare's start runs in a thread: let it end, then stop its process too
            await asyncio.gather(*self._stopping, *self._refills, return_exceptions=True)
            await asyncio.to_thread(self._stop_all)
            await self._session.close()

    async def scrape_gateway(self) -> None:
        """The policy's signals from the gateway's /metrics now (a failed scrape keeps the
        last ones, as a Prometheus query would answer from the last sample)."""
        assert self._session is not None
        try:
            async with self._session.get(
                f"{self.gateway_url}/metrics",
                timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S),
            ) as resp:
                samples = parse_metrics(await resp.text(), SIGNAL_NAMES)
            for name in SIGNAL_NAMES:
                self._signals[name] = metric_sum(samples, name) or 0.0
            self._gateway_unreachable = False
            self._gateway_seen = True
        except (TimeoutError, aiohttp.ClientError) as exc:
            why = str(exc) or type(exc).__name__
            if not self._gateway_seen and time.monotonic() - self._started < GATEWAY_START_S:
                self._gateway_error = why  # a gateway starting after its fleet: not yet
                return
            if not self._gateway_unreachable:  # once per outage, not every scrape
                log.warning("gateway %s/metrics unreachable (%s): the policy sees its "
                            "last signals", self.gateway_url, why)  # fmt: skip
            self._gateway_unreachable = True

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
        """A spare process (or one started now) serves from the modelled ready time (or
        once it has started and answered its warm-up request, if later)."""
        await self._take_process(e.replica_id)
        await asyncio.sleep(max(e.ready_at - self.now(), 0.0) / self.speedup)
        now = aligned(self.now(), e.ready_at, self.speedup)
        self._on_effects(self.controller.mark_ready(e.replica_id, now), now)

    async def _drain(self, e: DrainReplica) -> None:
        """Stopped when nothing runs or waits on it any more, or at its deadline."""
        await asyncio.sleep(DRAIN_GRACE_S)
        url = self._urls[e.replica_id]
        assert self._session is not None
        while self.now() < e.deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._session.get(
                    f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
                ) as resp:
                    samples = parse_metrics(await resp.text())
                busy = sum(
                    metric_sum(samples, n) or 0.0
                    for n in ("vllm:num_requests_running", "vllm:num_requests_waiting")
                )
                if busy == 0:
                    self._on_effects(self.controller.drained(e.replica_id, self.now()), self.now())
                    return
            await asyncio.sleep(DRAIN_POLL_S)
        # past the deadline the controller stops it (drain_timeout) at its next step

    async def _take_process(self, rid: int) -> None:
        """Replica `rid`'s process: a spare if one is ready (then another spare is
        started), else one started now."""
        if self._spares:
            proc, url = self._spares.pop(0)
            self._procs[rid], self._urls[rid] = proc, url
            refill = asyncio.ensure_future(self._add_spare())
            self._refills.add(refill)
            refill.add_done_callback(self._refills.discard)
        else:
            proc, url = self._new_process()
            self._procs[rid], self._urls[rid] = proc, url
            await asyncio.to_thread(proc.start)
            await self._warm_up(url)
        log.info("replica %d is process %s", rid, url)

    async def _add_spare(self) -> None:
        proc, url = self._new_process()
        await asyncio.to_thread(proc.start)
        await self._warm_up(url)
        self._spares.append((proc, url))

    async def _warm_up(self, url: str) -> None:
        """One short streamed chat request before the process serves: a fresh Python
        server's first request pays lazy imports and first-use setup (~25 ms of wall time,
        100 ms of engine time at 4x, more under load), which a real replica has paid in its
        start-up (vLLM's dummy run and graph capture) and the simulator never charges."""
        assert self._session is not None
        timeout_s = 10 * SCRAPE_TIMEOUT_S
        try:
            model = (await asyncio.to_thread(served_models, url, timeout_s))[0]
            body = {"model": model, "max_tokens": 1, "stream": True,
                    "messages": [{"role": "user", "content": "warm-up"}]}  # fmt: skip
            async with self._session.post(
                f"{url}/v1/chat/completions", json=body,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:  # fmt: skip
                await resp.read()
        except (BurstguardError, IndexError, TimeoutError, aiohttp.ClientError) as exc:
            log.warning("warm-up of %s failed (%s): it serves cold", url, exc)

    def _new_process(self) -> tuple[ManagedProcess, str]:
        """An emulator process on a free port, not started yet (stopped at the end)."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        self._launched += 1
        log_path = self.log_dir / f"process-{self._launched}.log" if self.log_dir else None
        proc = ManagedProcess(self._argv(port), f"{url}/health", log_path=log_path)
        self._every.append(proc)
        return proc, url

    def _publish(self) -> None:
        write_backend_file(self.backend_file, [self._urls[r] for r in self._listed])

    def _stop_all(self) -> None:
        for proc in self._every:
            proc.stop()
        self._procs.clear()
        self._spares.clear()
