"""The failover retry budget: how many failed requests may be sent again to another backend,
so that a dying fleet is not hammered by its own retries.

Envoy's retry_budget (`budget_percent` 20 %, `min_retry_concurrency` 3) bounds the retries
*in flight* by a share of the active requests. The gateway bounds them over a window, as
the issue asks: a retry is allowed while the retries started in the last `window_s` stay
below `ratio` x the requests started in that window — or, whatever the window says, while
fewer than `min_concurrency` retries are in flight (so a quiet gateway can still fail over
its few requests). Counts are kept in `_BUCKETS` time buckets: memory does not grow with
the request rate.
"""

from __future__ import annotations

import math
from collections import deque

from burstguard.core.fleet.config import RetryBudgetConfig

_BUCKETS = 20


class _WindowCount:
    """Events in the last `window_s`, counted per bucket of `window_s / _BUCKETS`."""

    def __init__(self, window_s: float) -> None:
        self._width = window_s / _BUCKETS
        self._buckets: deque[list[float]] = deque()  # [bucket index, count]
        self._total = 0.0

    def _trim(self, now: float) -> None:
        oldest = math.floor(now / self._width) - _BUCKETS + 1
        while self._buckets and self._buckets[0][0] < oldest:
            self._total -= self._buckets.popleft()[1]

    def add(self, now: float) -> None:
        self._trim(now)
        index = math.floor(now / self._width)
        if self._buckets and self._buckets[-1][0] == index:
            self._buckets[-1][1] += 1
        else:
            self._buckets.append([index, 1])
        self._total += 1

    def count(self, now: float) -> float:
        self._trim(now)
        return self._total


class RetryBudget:
    """`on_request` for each original request; `try_retry` before each failover (and
    `on_retry_done` when that retry ends, whatever its outcome)."""

    def __init__(self, cfg: RetryBudgetConfig) -> None:
        self.cfg = cfg
        self._requests = _WindowCount(cfg.window_s)
        self._retries = _WindowCount(cfg.window_s)
        self.retries_in_flight = 0
        self.denied = 0

    def on_request(self, now: float) -> None:
        self._requests.add(now)

    def allows(self, now: float) -> bool:
        if self.retries_in_flight < self.cfg.min_concurrency:
            return True
        return self._retries.count(now) + 1 <= self.cfg.ratio * self._requests.count(now)

    def try_retry(self, now: float) -> bool:
        """Spends one retry if the budget has one; False (and counted) when it is spent."""
        if not self.allows(now):
            self.denied += 1
            return False
        self._retries.add(now)
        self.retries_in_flight += 1
        return True

    def on_retry_done(self) -> None:
        self.retries_in_flight = max(0, self.retries_in_flight - 1)
