"""Active health probes: GET `probe_path` on each backend `Fleet.probes_due` names.

The shell around `HealthCheck`: a 2xx answer within `probe_timeout_s` is a success;
anything else (refused, reset, timeout, another status) a failure. Each result goes back
to the fleet with the clock time it arrived. A 404 counts as up: the server answered, it
just has no such path (llama-cpp-python's has no /health; probing another path instead,
such as /v1/models, would interrupt its running generation, which it does on any new
request to the model).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp

from burstguard.core.fleet.fleet import Fleet


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
    """True when `url` answers 2xx (or 404: no such path, but the server is up) within
    `timeout_s`."""
    status = await probe_status(session, url, timeout_s)
    return status is not None and (200 <= status < 300 or status == 404)


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

    async def _one(self, url: str) -> None:
        cfg = self._fleet.cfg.health
        ok = await probe(self._session, url + cfg.probe_path, cfg.probe_timeout_s)
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
