"""The PromQL checker catches the seed's mistakes and passes their corrections."""

from __future__ import annotations

import pytest

from burstguard.deploycheck import catalogue, lint
from burstguard.deploycheck.expressions import Expression, parse_duration_s

CAT = catalogue.load()


def rules(expr: str, kind: str = "keda", scrape_s: float = 5.0, recorded=()) -> list[str]:
    found = lint.check(Expression(kind, "test", expr), CAT, recorded, scrape_s)  # type: ignore[arg-type]
    return [f.rule for f in found]


def test_seed_queue_trigger_is_rate_over_a_gauge() -> None:
    found = lint.check(
        Expression("keda", "seed", "sum(rate(llm_request_queue_depth[1m]))"), CAT, (), 5.0
    )
    assert [f.rule for f in found] == ["counter-function-on-gauge"]
    assert "max_over_time(llm_request_queue_depth[1m])" in found[0].message


def test_seed_arrival_trigger_window_holds_too_few_scrapes() -> None:
    assert rules("sum(rate(llm_request_total[10s]))", scrape_s=5.0) == ["range-too-short"]
    assert rules("sum(rate(llm_request_total[10s]))", scrape_s=2.0) == []


@pytest.mark.parametrize(
    "expr",
    [
        "sum by (class) (llm_request_queue_depth)",
        "llm_request_queue_depth",
        "max without (class) (llm_request_queue_depth)",
        "topk(1, llm_request_queue_depth)",
        "max_over_time(llm_request_queue_depth[1m])",
        "sum(llm_request_queue_depth) + llm_request_queue_depth",
        "histogram_quantile(0.9, sum by (class, le) (rate(burstguard_ttft_seconds_bucket[1m])))",
    ],
)
def test_keda_query_that_can_return_several_series_fails(expr: str) -> None:
    assert "keda-several-series" in rules(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "sum(max_over_time(llm_request_queue_depth[1m]))",
        "sum(rate(burstguard_arrivals_total[1m]))",
        "max(burstguard_desired_replicas)",
        "(sum(llm_request_queue_depth) + 2 * sum(vllm:num_requests_waiting))",
        "clamp_min(sum(llm_request_queue_depth), 0)",
        "max_over_time(sum(llm_request_queue_depth)[1m:15s])",  # `burstguard scaling export`
        "histogram_quantile(0.9, sum by (le) (rate(burstguard_ttft_seconds_bucket[1m])))",
    ],
)
def test_corrected_keda_queries_pass(expr: str) -> None:
    assert rules(expr) == []


def test_removed_vllm_metric_fails_and_names_its_replacement() -> None:
    found = lint.check(
        Expression("panel", "router", "avg(vllm:gpu_cache_usage_perc)"), CAT, (), 5.0
    )
    assert [f.rule for f in found] == ["removed-metric"]
    assert "vllm:kv_cache_usage_perc" in found[0].message
    assert rules("avg(vllm:kv_cache_usage_perc)", kind="panel") == []


def test_unknown_name_and_bad_syntax_fail() -> None:
    assert rules("sum(vllm:kv_cache_usage_percent)") == ["unknown-metric"]
    assert rules("sum(rate(burstguard_arrivals_total[1m])") == ["parse"]


def test_recorded_series_are_gauges() -> None:
    recorded = {"burstguard:queue_depth:sum"}
    assert rules("rate(burstguard:queue_depth:sum[5m])", "panel", recorded=recorded) == [
        "counter-function-on-gauge"
    ]
    assert rules("deriv(burstguard:queue_depth:sum[5m])", "panel", recorded=recorded) == []


def test_gauge_functions_over_counters_and_quantiles_without_le_fail() -> None:
    assert rules("deriv(burstguard_arrivals_total[5m])", "panel") == ["gauge-function-on-counter"]
    expr = "histogram_quantile(0.9, sum by (class) (rate(burstguard_ttft_seconds_bucket[5m])))"
    assert rules(expr, "panel") == ["quantile-without-le"]
    # a histogram's _bucket/_count/_sum series are counters: rate() of them is right
    assert rules("sum(rate(vllm:time_to_first_token_seconds_count[1m]))") == []


def test_catalogue_lookup_and_durations() -> None:
    assert CAT.lookup("burstguard_ttft_seconds_bucket")[1] == "counter"  # type: ignore[index]
    assert CAT.lookup("burstguard_ttft_seconds")[1] == "histogram"  # type: ignore[index]
    assert CAT.lookup("llm_request_queue_depth_bucket") is None
    assert parse_duration_s("1m30s") == 90.0 and parse_duration_s("500ms") == 0.5
    with pytest.raises(ValueError):
        parse_duration_s("5 minutes")
