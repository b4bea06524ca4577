"""The retry helper: full-jitter bounds, Retry-After as a floor, budgets, what is retryable."""

from __future__ import annotations

import asyncio
import random

import pytest

from burstguard.client import (
    RETRY_COUNT_HEADER,
    RetryableFailure,
    RetryBudget,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
)


def test_full_jitter_stays_within_the_exponential_envelope() -> None:
    policy = RetryPolicy(mode="exponential", max_retries=10, base_s=0.5, cap_s=4.0)
    rng = random.Random(1)
    for attempt, bound in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        delays = [policy.decide(attempt, status=503, rng=rng).delay_s for _ in range(2000)]
        assert min(delays) >= 0.0 and max(delays) <= bound
        # full jitter: uniform over [0, bound], so the mean is about half the bound
        assert abs(sum(delays) / len(delays) - bound / 2) < bound * 0.05


def test_immediate_retries_at_once_and_none_never_retries() -> None:
    assert RetryPolicy(mode="immediate").decide(0, error="timeout").delay_s == 0.0
    assert not RetryPolicy(mode="none").decide(0, status=503).retry


def test_retry_after_is_a_floor_and_client_errors_are_not_retried() -> None:
    policy = RetryPolicy(mode="exponential", base_s=0.1, cap_s=0.2)
    decision = policy.decide(0, status=429, retry_after_s=3.0, rng=random.Random(0))
    assert decision.retry and decision.delay_s == 3.0
    ignoring = RetryPolicy(mode="exponential", base_s=0.1, cap_s=0.2, honor_retry_after=False)
    assert ignoring.decide(0, status=429, retry_after_s=3.0).delay_s <= 0.2
    assert not policy.decide(0, status=400).retry
    assert not policy.decide(0, status=401).retry
    assert policy.decide(0, error="connection_refused").retry
    assert not policy.decide(3, status=503).retry  # max_retries = 3 spent


def test_budget_caps_retries_at_a_share_of_requests() -> None:
    now = [0.0]
    budget = RetryBudget(ratio=0.1, min_retries=2, window_s=10.0, clock=lambda: now[0])
    for _ in range(100):
        budget.on_request()
    granted = sum(budget.try_spend() for _ in range(50))
    assert granted == 12  # 2 + 10% of 100
    now[0] = 20.0  # the window slid past everything
    assert budget.try_spend()


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    date = "Wed, 02 Dec 2026 12:00:10 GMT"
    from email.utils import parsedate_to_datetime

    now = parsedate_to_datetime(date).timestamp() - 10.0
    assert parse_retry_after(date, now=now) == pytest.approx(10.0)


def test_call_with_retries_sleeps_as_told_counts_its_tries_then_returns() -> None:
    tries: list[dict[str, str]] = []
    slept: list[float] = []

    async def send(headers: dict[str, str]) -> str:
        tries.append(headers)
        if len(tries) < 3:
            raise RetryableFailure(status=429, retry_after_s=2.0)
        return "ok"

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(mode="exponential", base_s=0.01, cap_s=0.02)
    assert asyncio.run(call_with_retries(send, policy, sleep=fake_sleep)) == "ok"
    assert slept == [2.0, 2.0]
    assert [t[RETRY_COUNT_HEADER] for t in tries] == ["0", "1", "2"]

    async def always_fails(headers: dict[str, str]) -> str:
        raise RetryableFailure(status=503)

    with pytest.raises(RetryableFailure):
        asyncio.run(call_with_retries(always_fails, policy, sleep=fake_sleep))
