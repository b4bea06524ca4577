"""Active health probes: GET `probe_path` on each backend `Fleet.probes_due` names.

The shell around `HealthCheck`: a 2xx answer within `probe_timeout_s` is a success;
anything else (refused, reset, timeout, another status) a failure. Each result goes back
to the fleet with the clock time it arrived. A backend without the probe path (404:
llama-cpp-python's server has no /health) is probed on `/v1/models` from then on — a
missing endpoint is not a dead backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp

from burstguard.gateway.fleet.fleet import Fleet

FALLBACK_PATH = "/v1/models"


async def probe_status(session: aiohttp.ClientSession, url: str, timeout_s: float) -> int | None:
    """`url`'s HTTP status within `timeout_s`; None: no answer."""
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.get(url, timeout=timeout) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    """True when `url` answers 2xx within `timeout_s`."""
    status = await probe_status(session, url, timeout_s)
    return status is not None and 200 <= status < 300


class HealthProber:
    """Probes the fleet's backends in the background, `tick_s` apart at most."""

    def __init__(
        self,
        fleet: Fleet,
        session: aiohttp.ClientSession,
        *,
        tick_s: float = 0.05,
        on_up: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`on_up(url)`: called on each successful probe (e.g. to scrape a returning
        backend at once, whose scraper slowed down while it was away)."""
        self._fleet = fleet
        self._on_up = on_up
        self._session = session
        self._tick_s = tick_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._probes: set[asyncio.Task[None]] = set()
        self._fallback: set[str] = set()  # backends without the probe path

    async def _one(self, url: str) -> None:
        cfg = self._fleet.cfg.health
        path = FALLBACK_PATH if url in self._fallback else cfg.probe_path
        status = await probe_status(self._session, url + path, cfg.probe_timeout_s)
        if status == 404 and path != FALLBACK_PATH:
            self._fallback.add(url)
            status = await probe_status(self._session, url + FALLBACK_PATH, cfg.probe_timeout_s)
        ok = status is not None and 200 <= status < 300
        self._fleet.on_probe(url, ok, self._clock())
        if ok and self._on_up is not None:
            self._on_up(url)

    def tick(self) -> None:
        """Starts the probes that are due now."""
        for url in self._fleet.probes_due(self._clock()):
            task = asyncio.create_task(self._one(url))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    async def _loop(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self._tick_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._probes) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
