"""parse_metrics / metric_sum on real-shaped exposition text, and the poller on a live server."""

from __future__ import annotations

import math

import pytest
from aiohttp import web
from tests.conftest import serve_app

from burstguard.scrape import MetricsPoller, metric_sum, parse_metrics

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 3.0
vllm:num_requests_running{model_name="smol",engine="1"} 2.0
vllm:num_requests_waiting{engine="0",model_name="smol"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="smol"} 0.42
vllm:num_preemptions_total{engine="0",model_name="smol"} 5.0 1700000000000
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="smol"} 12.0
vllm:request_success_total{finished_reason="stop",model_name="a \\"quoted\\", name"} 1.0
llm_request_queue_depth 11
process_start_time_seconds NaN
"""


def test_parse_keeps_labels_sorted_and_drops_timestamps() -> None:
    samples = parse_metrics(VLLM_TEXT)
    assert samples['vllm:num_requests_running{engine="1",model_name="smol"}'] == 2.0
    assert samples['vllm:num_preemptions_total{engine="0",model_name="smol"}'] == 5.0
    assert samples['vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="smol"}'] == 12
    key = 'vllm:request_success_total{finished_reason="stop",model_name="a \\"quoted\\", name"}'
    assert samples[key] == 1.0
    assert samples["llm_request_queue_depth"] == 11
    assert math.isnan(samples["process_start_time_seconds"])


def test_metric_sum_adds_label_sets_and_reports_absence() -> None:
    samples = parse_metrics(VLLM_TEXT)
    assert metric_sum(samples, "vllm:num_requests_running") == 5.0
    assert metric_sum(samples, "llm_request_queue_depth") == 11
    assert metric_sum(samples, "vllm:num_requests") is None  # a prefix is not a match


@pytest.mark.parametrize("bad", ["<html><body>hi</body></html>", 'm{a="x" 1', "metric notanumber"])
def test_malformed_text_raises(bad: str) -> None:
    with pytest.raises(ValueError, match="metrics"):
        parse_metrics(bad)


async def test_poller_records_series_and_counts_failures() -> None:
    depth = {"n": 0}

    async def metrics(_: web.Request) -> web.Response:
        depth["n"] += 1
        if depth["n"] == 2:
            return web.Response(status=500, text="boom")
        body = f"llm_request_queue_depth {depth['n']}\nvllm:num_requests_waiting 1\n"
        return web.Response(text=body)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    async with serve_app(app) as base:
        poller = MetricsPoller(f"{base}/metrics", interval_s=0.02)
        for _ in range(3):
            await poller.poll_once()
        series = poller.series()
    assert poller.errors == 1 and "500" in (poller.last_error or "")
    assert series["llm_request_queue_depth"] == [1.0, 3.0]
    assert series["vllm:num_requests_waiting"] == [1.0, 1.0]
    assert "vllm:kv_cache_usage_perc" not in series
    assert len(series["t"]) == 2
