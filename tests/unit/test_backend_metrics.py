"""The backend's own view from /metrics: vLLM's names, then SGLang's."""

from __future__ import annotations

import pytest

from burstguard.live.gateway.backend_metrics import backend_state

SGLANG_TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 12.0
sglang:num_queue_reqs{model_name="qwen",tp_rank="0"} 5.0
sglang:token_usage{model_name="qwen",tp_rank="0"} 0.37
sglang:gen_throughput{model_name="qwen",tp_rank="0"} 812.5
"""


def test_sglang_names_fill_the_state() -> None:
    state = backend_state(SGLANG_TEXT)
    assert (state.waiting, state.running) == (5, 12)
    assert state.kv_usage == pytest.approx(0.37)


def test_vllm_names_win_over_sglang_and_old_kv_name_is_read() -> None:
    text = (
        "vllm:num_requests_waiting 2\nvllm:num_requests_running 3\n"
        "vllm:gpu_cache_usage_perc 0.5\n" + SGLANG_TEXT
    )
    state = backend_state(text)
    assert (state.waiting, state.running, state.kv_usage) == (2, 3, 0.5)


def test_no_known_names_gives_an_empty_state_and_garbage_raises() -> None:
    assert backend_state("other_metric 1\n").waiting is None
    with pytest.raises(ValueError, match="metrics"):
        backend_state("<html>not metrics</html>")
