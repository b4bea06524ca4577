"""Client-side retries that damp a burst instead of amplifying it (the seed's retry storms).

Exponential backoff with full jitter (delay ~ U(0, min(cap, base * 2**attempt))), 2-3
retries by default, a server's Retry-After honoured as the minimum wait (`retry-after-ms`
first, then `Retry-After`, as the official `openai` SDK reads them:
`retry_after_from_headers`), a server's `x-should-retry` obeyed (a quota that refills
in minutes says `false`: no retry), and an optional
retry budget so retries can never exceed a fixed share of the traffic. `immediate` exists to
reproduce the storm: every failure is retried at once. Pure decisions (`RetryPolicy.decide`)
plus one small async helper (`call_with_retries`) that applications can use with any HTTP
library. Every try says which try it is in `RETRY_COUNT_HEADER`, so a server (the gateway's
`burstguard_retried_requests_total`) can tell retries from new requests.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

RetryMode = Literal["none", "immediate", "exponential"]
RETRY_MODES: tuple[RetryMode, ...] = ("none", "immediate", "exponential")
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
RETRYABLE_ERRORS = frozenset({"timeout", "connection_refused", "connection_error", "stream_broken"})
RETRY_COUNT_HEADER = "x-stainless-retry-count"
"""Retries made before this try ("0" on the first): the header the official OpenAI and
Anthropic SDKs send on every request, reused so one name covers SDK and burstguard clients."""

T = TypeVar("T")


def retry_headers(retries: int) -> dict[str, str]:
    """The header a try carries after `retries` earlier tries of the same request."""
    return {RETRY_COUNT_HEADER: str(retries)}


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP-date; None when absent or invalid."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if seconds == seconds else None  # NaN -> None


def retry_after_from_headers(headers: Mapping[str, str]) -> float | None:
    """The server's wait in seconds: `retry-after-ms` (milliseconds, exact) when present,
    else `Retry-After`; None when neither is usable. `headers`: lower-case names (a
    case-insensitive mapping, as aiohttp's and httpx's are, also works)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms)
        except ValueError:
            value = math.nan
        if value == value and value >= 0:  # not NaN
            return value / 1000.0
    return parse_retry_after(headers.get("retry-after"))


def should_retry_from_headers(headers: Mapping[str, str]) -> bool | None:
    """The server's `x-should-retry` (true/false); None when absent or anything else."""
    value = headers.get("x-should-retry")
    return {"true": True, "false": False}.get((value or "").strip().lower())


@dataclass
class RetryBudget:
    """At most `ratio` retries per original request over a sliding `window_s`, plus
    `min_retries` always allowed (so a quiet client can still retry)."""

    ratio: float = 0.2
    min_retries: int = 10
    window_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _requests: deque[float] = field(default_factory=deque, repr=False)
    _retries: deque[float] = field(default_factory=deque, repr=False)

    def _trim(self, now: float) -> None:
        for q in (self._requests, self._retries):
            while q and q[0] < now - self.window_s:
                q.popleft()

    def on_request(self) -> None:
        self._requests.append(self.clock())

    def try_spend(self) -> bool:
        """Takes one retry from the budget; False when it is spent."""
        now = self.clock()
        self._trim(now)
        if len(self._retries) >= self.min_retries + self.ratio * len(self._requests):
            return False
        self._retries.append(now)
        return True


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying again."""

    mode: RetryMode = "exponential"
    max_retries: int = 3
    base_s: float = 0.5
    cap_s: float = 8.0
    honor_retry_after: bool = True
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.mode not in RETRY_MODES:
            raise ValueError(f"retry mode {self.mode!r}: expected one of {', '.join(RETRY_MODES)}")
        if self.max_retries < 0 or self.base_s < 0 or self.cap_s < self.base_s:
            raise ValueError("retry policy needs max_retries >= 0 and 0 <= base <= cap")

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: U(0, min(cap, base * 2**attempt)); attempt 0 is the first retry."""
        if self.mode != "exponential":
            return 0.0
        return rng.uniform(0.0, min(self.cap_s, self.base_s * 2.0**attempt))

    def decide(
        self,
        attempt: int,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after_s: float | None = None,
        budget: RetryBudget | None = None,
        rng: random.Random | None = None,
        should_retry: bool | None = None,
    ) -> RetryDecision:
        """Whether failed try number `attempt` (0-based retries made so far) is retried.

        A 429/5xx status or a transport error kind (timeout, refused, broken stream) is
        retryable; other 4xx are not (the request itself is wrong). The server's
        `x-should-retry` (`should_retry`) overrides the status rule either way.
        """
        if self.mode == "none" or attempt >= self.max_retries:
            return RetryDecision(False, reason="no retries left")
        if should_retry is False:
            return RetryDecision(False, reason="the server said x-should-retry: false")
        by_status = status is not None and status in RETRYABLE_STATUS
        if not (should_retry or by_status or (status is None and error in RETRYABLE_ERRORS)):
            return RetryDecision(False, reason="not retryable")
        if budget is not None and not budget.try_spend():
            return RetryDecision(False, reason="retry budget spent")
        delay = self.backoff_s(attempt, rng or random.Random())
        if self.honor_retry_after and retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.max_retry_after_s))
        return RetryDecision(True, delay)


@dataclass
class RetryableFailure(Exception):
    """Raised by a `send` callable to report a failed try: a status or an error kind, the
    server's Retry-After in seconds if it sent one (`retry_after_from_headers`) and its
    `x-should-retry` (`should_retry_from_headers`)."""

    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None
    should_retry: bool | None = None

    @classmethod
    def from_response(cls, status: int, headers: Mapping[str, str]) -> RetryableFailure:
        """The failure an HTTP answer describes, with what its headers say about retrying."""
        return cls(
            status=status,
            retry_after_s=retry_after_from_headers(headers),
            should_retry=should_retry_from_headers(headers),
        )

    def __str__(self) -> str:
        return self.error or f"HTTP {self.status}"


async def call_with_retries(
    send: Callable[[dict[str, str]], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    budget: RetryBudget | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Calls `send(headers)` until it returns, retrying RetryableFailure as the policy says;
    the last failure is re-raised when the policy gives up. `headers` (`retry_headers`) are
    for `send` to add to its request, so the server can count the retries."""
    policy = policy or RetryPolicy()
    rng = rng or random.Random()
    if budget is not None:
        budget.on_request()
    attempt = 0
    while True:
        try:
            return await send(retry_headers(attempt))
        except RetryableFailure as failure:
            decision = policy.decide(
                attempt, status=failure.status, error=failure.error,
                retry_after_s=failure.retry_after_s, budget=budget, rng=rng,
                should_retry=failure.should_retry,
            )  # fmt: skip
            if not decision.retry:
                raise
            await sleep(decision.delay_s)
            attempt += 1
