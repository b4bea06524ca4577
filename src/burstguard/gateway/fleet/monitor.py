"""FleetMonitor: the shell that keeps a `Fleet`'s observations current.

Discovery's lists go to `Fleet.set_backends`; each backend gets its own /metrics scraper
(`BackendMonitor`, the single-backend gateway's, so vLLM's and SGLang's names are read the
same way) whose results go to `Fleet.on_metrics` with the time they arrived; a
`HealthProber` probes /health. A backend the fleet forgets (drained) has its scraper
stopped. Nothing here decides anything: the fleet does. The gateway passes `on_metrics`
so that each scrape reaches the fleet through its core (`Scrape(state, url)`: the
backend's adaptive caps follow it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping

import aiohttp

from burstguard.gateway.backend_metrics import BackendMonitor
from burstguard.gateway.fleet.config import DiscoveryConfig
from burstguard.gateway.fleet.fleet import Fleet, FleetChange
from burstguard.gateway.fleet.probe import HealthProber
from burstguard.gateway.fleet.sources import Discovery
from burstguard.gateway.request import BackendState

OnMetrics = Callable[[str, BackendState, float], None]


class FleetMonitor:
    def __init__(
        self,
        fleet: Fleet,
        session: aiohttp.ClientSession,
        *,
        static: Iterable[str] = (),
        discovery: DiscoveryConfig | None = None,
        scrape_interval_s: float = 0.25,
        metrics_path: str = "/metrics",
        on_change: Callable[[FleetChange], None] | None = None,
        on_metrics: OnMetrics | None = None,
        metrics_urls: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`on_metrics(url, state, scraped_at)`: where scrapes go (default:
        `fleet.on_metrics`); `metrics_urls`: a backend's /metrics elsewhere than
        url + `metrics_path`."""
        self._fleet = fleet
        self._session = session
        self._interval = scrape_interval_s
        self._metrics_path = metrics_path
        self._on_change = on_change
        self._on_metrics: OnMetrics = on_metrics or fleet.on_metrics
        self._metrics_urls = dict(metrics_urls or {})
        self._fresh: dict[str, float] = {}  # url -> when the state last forwarded was scraped
        self._clock = clock
        self._discovery = Discovery(static, discovery or DiscoveryConfig(), self._discovered)
        self._prober = HealthProber(fleet, session, on_up=self._up, clock=clock)
        self._monitors: dict[str, BackendMonitor] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    @property
    def scraped(self) -> tuple[str, ...]:
        """Backends with a running /metrics scraper."""
        return tuple(self._monitors)

    async def start(self) -> tuple[str, ...]:
        """Reads discovery (a FileError or TargetError naming the field if a source
        fails), starts the scrapers and the prober. Returns the backends."""
        urls = await self._discovery.start()
        self._prober.start()
        return urls

    def _discovered(self, urls: tuple[str, ...]) -> None:
        change = self._fleet.set_backends(urls, self._clock())
        for url in change.added:
            self._watch(url)
        for url in change.removed:
            self.forget(url)
        if self._on_change is not None:
            self._on_change(change)

    def _watch(self, url: str) -> None:
        monitor = BackendMonitor(
            self._metrics_urls.get(url, url + self._metrics_path),
            self._session,
            self._interval,
            on_scrape=lambda: self._scraped(url),
            clock=self._clock,
        )
        self._monitors[url] = monitor
        monitor.start()

    def _scraped(self, url: str) -> None:
        """After each scrape: the latest state with the time it was scraped (a failed
        scrape leaves both as they were, so the state ages)."""
        monitor = self._monitors.get(url)
        if monitor is None or monitor.state is None:
            return
        if self._on_metrics == self._fleet.on_metrics:
            self._fleet.on_metrics(url, monitor.state, monitor.scraped_at)
        elif monitor.scraped_at != self._fresh.get(url):  # a new scrape, not a failed one
            self._fresh[url] = monitor.scraped_at
            self._on_metrics(url, monitor.state, monitor.scraped_at)

    def _up(self, url: str) -> None:
        """A probe answered: a scraper that slowed down while its backend was away scrapes
        now (else its stale metrics keep a returned backend 'saturated' for up to 5 s)."""
        monitor = self._monitors.get(url)
        if monitor is not None and not monitor.reachable:
            monitor.wake()

    def forget(self, url: str) -> None:
        """Stops `url`'s scraper: call it with what `Fleet.on_done` / `on_failure` report
        as removed (the fleet has forgotten the backend)."""
        monitor = self._monitors.pop(url, None)
        self._fresh.pop(url, None)
        if monitor is not None:
            task = asyncio.get_running_loop().create_task(monitor.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        await self._discovery.stop()
        await self._prober.stop()
        for monitor in self._monitors.values():
            await monitor.stop()
        self._monitors.clear()
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task
