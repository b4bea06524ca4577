"""Which arrivals the gateway counts as retries, and the Retry-After it records per 429."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from burstguard.client import RETRY_COUNT_HEADER
from burstguard.live.gateway.metrics import GatewayMetrics, GaugeSnapshot, is_retry


def test_only_a_positive_retry_count_is_a_retry() -> None:
    assert not is_retry({})
    assert not is_retry({RETRY_COUNT_HEADER: "0"})  # the SDKs' first try
    assert not is_retry({RETRY_COUNT_HEADER: "soon"})
    assert not is_retry({RETRY_COUNT_HEADER: "-1"})
    assert not is_retry({"x-retry-count": "2"})  # another header is not read
    assert is_retry({RETRY_COUNT_HEADER: "1"})
    assert is_retry({RETRY_COUNT_HEADER: "12"})


def test_retries_and_retry_after_are_counted_per_class() -> None:
    m = GatewayMetrics(lambda: GaugeSnapshot({}, 0, 0, 0), clock=lambda: 0.0)
    m.arrived("batch", retry=False)
    m.arrived("batch", retry=True)
    m.arrived("interactive", retry=True)
    m.arrived("interactive", retry=True)
    for seconds in (1, 3, 75):
        m.shed("batch", seconds)
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(m.render().decode())
        for s in family.samples
    }
    assert values[("burstguard_retried_requests_total", (("class", "batch"),))] == 1
    assert values[("burstguard_retried_requests_total", (("class", "interactive"),))] == 2
    batch = (("class", "batch"),)
    assert values[("burstguard_retry_after_seconds_count", batch)] == 3
    assert values[("burstguard_retry_after_seconds_sum", batch)] == 79
    assert (
        values[("burstguard_retry_after_seconds_bucket", (("class", "batch"), ("le", "3.0")))] == 2
    )
    assert (
        values[("burstguard_retry_after_seconds_bucket", (("class", "batch"), ("le", "60.0")))] == 2
    )
    assert (
        values[("burstguard_retry_after_seconds_bucket", (("class", "batch"), ("le", "90.0")))] == 3
    )
