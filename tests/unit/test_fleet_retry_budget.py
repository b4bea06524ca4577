"""The failover retry budget: a share of the requests over a window, a concurrency floor."""

from __future__ import annotations

from burstguard.core.fleet.config import RetryBudgetConfig
from burstguard.core.fleet.retry_budget import RetryBudget


def test_floor_then_ratio_of_requests_in_window() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.2, window_s=10.0, min_concurrency=3))
    for i in range(50):
        budget.on_request(i * 0.1)
    # 3 in flight are always allowed; then at most 20% of 50 = 10 in the window
    granted = sum(budget.try_retry(5.0) for _ in range(30))
    assert granted == 10
    assert budget.denied == 20
    for _ in range(7):
        budget.on_retry_done()  # 3 still in flight: the floor does not help
    assert not budget.try_retry(5.1)


def test_floor_allows_a_quiet_gateway_to_fail_over() -> None:
    budget = RetryBudget(RetryBudgetConfig(min_concurrency=3))
    budget.on_request(0.0)
    assert [budget.try_retry(0.0) for _ in range(4)] == [True, True, True, False]
    budget.on_retry_done()
    assert budget.try_retry(0.1)


def test_window_slides() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.5, window_s=10.0, min_concurrency=0))
    for _ in range(10):
        budget.on_request(0.0)
    assert sum(budget.try_retry(1.0) for _ in range(10)) == 5
    # 11 s later the requests and the retries have left the window
    assert not budget.try_retry(11.0)
    for _ in range(4):
        budget.on_request(11.0)
    assert sum(budget.try_retry(11.0) for _ in range(4)) == 2
