"""BackendMonitor: the backend's own view (waiting, running, KV usage) from its /metrics.

vLLM's names are read first; SGLang's (`sglang:num_queue_reqs`, `sglang:num_running_reqs`,
`sglang:token_usage`, a 0..1 fraction of its KV token pool) stand in where vLLM's are absent.

Scrapes every `scrape_interval_s` (~250 ms) with burstguard's one Prometheus parser
(`burstguard.scrape`) and turns the vLLM-named series into the core's `BackendState`.
A backend without /metrics (404, not Prometheus text, unreachable) is fine: `state` is
None and the dispatcher falls back to the configured caps; after a few failed scrapes in a
row the monitor slows down to one try every `_SLOW_INTERVAL_S`, so a backend that never
had metrics is not asked four times a second forever. Memory is bounded: only the latest
scrape is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp

from burstguard.core.fleet.state import BackendState
from burstguard.scrape import metric_sum, parse_metrics

# each signal: the names that carry it, in the order they are tried
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
# vLLM v1 name, then the older one (removed by vllm PR #29330), then SGLang's
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
_NAMES = (*WAITING, *RUNNING, *KV_USAGE)


def _first(samples: dict[str, float], names: tuple[str, ...]) -> float | None:
    """The sum of the first of `names` the scrape has; None when it has none of them."""
    for name in names:
        value = metric_sum(samples, name)
        if value is not None:
            return value
    return None


_SLOW_AFTER = 4  # failed scrapes in a row before polling slows down
_SLOW_INTERVAL_S = 5.0
_STALE_SCRAPES = 4  # a state older than this many intervals is not used


def backend_state(text: str) -> BackendState:
    """The BackendState a /metrics body describes (summed over engines and models)."""
    samples = parse_metrics(text, only=_NAMES)
    if not samples:  # none of the known names: parse it all, so non-metrics text is an error
        samples = parse_metrics(text)
    waiting = _first(samples, WAITING)
    running = _first(samples, RUNNING)
    kv = _first(samples, KV_USAGE)
    if kv is not None and kv > 1.0:  # some engines export a percentage
        kv /= 100.0
    return BackendState(
        waiting=None if waiting is None else int(waiting),
        running=None if running is None else int(running),
        kv_usage=kv,
    )


class BackendMonitor:
    """Polls one backend's /metrics in the background; `state` is the latest fresh view."""

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        interval_s: float = 0.25,
        *,
        on_scrape: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self._session = session
        self._on_scrape = on_scrape
        self._clock = clock
        self._state: BackendState | None = None
        self._at = -float("inf")
        self.scrapes = 0
        self.errors = 0
        self.failures_in_a_row = 0
        self.last_error: str | None = None
        self.reachable = True  # the backend answered the last scrape (any HTTP status)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Scrape now instead of at the next interval (the backend is known to be back)."""
        self._wake.set()

    @property
    def state(self) -> BackendState | None:
        """The latest scrape, or None when there is none recent (fall back to the caps)."""
        if self._clock() - self._at > _STALE_SCRAPES * self.interval_s:
            return None
        return self._state

    @property
    def scraped_at(self) -> float:
        """Clock time of the last successful scrape (-inf before the first): its age is
        what the fleet's router weighs (stale metrics count as saturated)."""
        return self._at

    @property
    def has_metrics(self) -> bool:
        return self.state is not None

    async def poll_once(self) -> BackendState | None:
        """Scrapes once; the new state, or None (the error is counted, never raised)."""
        timeout = aiohttp.ClientTimeout(total=max(1.0, 4 * self.interval_s))
        try:
            async with self._session.get(self.url, timeout=timeout) as resp:
                self.reachable = True
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                text = await resp.text()
            state = backend_state(text)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, aiohttp.ClientConnectionError | TimeoutError):
                self.reachable = False
            self.errors += 1
            self.failures_in_a_row += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        self.scrapes += 1
        self.failures_in_a_row = 0
        self._state = state
        self._at = self._clock()
        return state

    async def _loop(self) -> None:
        next_at = self._clock()
        while True:
            await self.poll_once()
            if self._on_scrape is not None:
                self._on_scrape()
            slow = self.failures_in_a_row >= _SLOW_AFTER
            next_at = max(next_at + self.interval_s, self._clock())
            if slow:
                next_at = self._clock() + _SLOW_INTERVAL_S
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, next_at - self._clock()))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
