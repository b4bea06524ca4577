"""`burstguard emulate` against real peers: the official openai SDK, Prometheus' parser."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import assert_openai_chat_works, start_emulator

from burstguard.scrape import metric_sum, parse_metrics
from burstguard.workload import seed

MODEL = "llama3-8b-h100"
VLLM_NAMES = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
}  # fmt: skip


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def metrics(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        return resp.read().decode()


def post(base: str, path: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, data=body, method="POST",
                                 headers={"content-type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_openai_sdk_chat_and_completions(emulator: str) -> None:
    c = client(emulator)
    assert_openai_chat_works(c, MODEL)
    text = c.completions.create(model=MODEL, prompt="abcd" * 25, max_tokens=3,
                                extra_body={"ignore_eos": True})  # fmt: skip
    assert text.usage is not None and text.usage.prompt_tokens == 25
    assert text.usage.completion_tokens == 3
    assert [m.id for m in c.models.list()] == [MODEL]


def test_metrics_carry_vllm_names_and_parse(emulator: str) -> None:
    client(emulator).completions.create(
        model=MODEL, prompt="x" * 400, max_tokens=4, extra_body={"ignore_eos": True}
    )
    text = metrics(emulator)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names >= VLLM_NAMES
    samples = parse_metrics(text)
    assert metric_sum(samples, "vllm:prompt_tokens_total") == 100
    assert metric_sum(samples, "vllm:generation_tokens_total") == 4
    assert metric_sum(samples, "vllm:time_to_first_token_seconds_count") == 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400),
        (b'{"model": "llama3-8b-h100"}', 400),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404),
        (
            b'{"model": "llama3-8b-h100", "max_tokens": 0, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            400,
        ),
        (
            b'{"model": "llama3-8b-h100", "max_tokens": 9000, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            400,
        ),
        # vLLM's rules: a non-zero priority needs --scheduling-policy priority; a final
        # message to continue must be the assistant's, and gets no new reply header
        (
            b'{"model": "llama3-8b-h100", "priority": 1, '
            b'"messages": [{"role": "user", "content": "x"}]}',
            400,
        ),
        (
            b'{"model": "llama3-8b-h100", "continue_final_message": true, '
            b'"add_generation_prompt": false, "messages": [{"role": "user", "content": "x"}]}',
            400,
        ),
        (
            b'{"model": "llama3-8b-h100", "continue_final_message": true, "messages": '
            b'[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}',
            400,
        ),
    ],
)
def test_bad_requests_get_openai_errors(emulator: str, body: bytes, status: int) -> None:
    code, payload = post(emulator, "/v1/chat/completions", body)
    assert code == status
    assert set(payload["error"]) >= {"message", "type", "code"}


def test_deep_nesting_and_negative_token_ids_get_openai_errors(emulator: str) -> None:
    """JSON nested past the parser's recursion limit was a plain-text 500; a negative
    token id was served as if it were a token (vLLM refuses it)."""
    code, payload = post(emulator, "/v1/completions", b"[" * 100_000 + b"]" * 100_000)
    assert code == 400 and payload["error"]["code"] == "invalid_json"
    code, payload = post(
        emulator, "/v1/completions", b'{"model": "llama3-8b-h100", "prompt": [5, -1]}'
    )
    assert code == 400 and "prompt" in payload["error"]["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_aborts_and_frees_blocks(tmp_path: Path, stream: bool) -> None:
    proc = start_emulator(tmp_path, speedup=1.0)

    async def cut_short(base: str) -> None:
        async with aiohttp.ClientSession() as session:
            body = {"model": MODEL, "prompt": "y" * 4000, "max_tokens": 4000,
                    "ignore_eos": True, "stream": stream}  # fmt: skip
            if not stream:  # no bytes come back before the end: hang up while it generates
                post = asyncio.ensure_future(session.post(base + "/v1/completions", json=body))
                await asyncio.sleep(0.5)
                post.cancel()
                return
            async with session.post(base + "/v1/completions", json=body) as resp:
                async for _ in resp.content:
                    break  # first chunk, then hang up

    with proc:
        base = proc.base_url  # type: ignore[attr-defined]
        asyncio.run(cut_short(base))
        for _ in range(50):
            samples = parse_metrics(metrics(base))
            aborted = metric_sum(samples, "burstguard_emulator_aborted_requests_total")
            if aborted and not metric_sum(samples, "vllm:num_requests_running"):
                break
            asyncio.run(asyncio.sleep(0.1))
        assert metric_sum(samples, "burstguard_emulator_aborted_requests_total") == 1
        assert metric_sum(samples, "vllm:num_requests_running") == 0
        assert metric_sum(samples, "vllm:kv_cache_usage_perc") == 0


@pytest.mark.parametrize("choice", ["tokenizer", "estimate"])
def test_prompt_tokens_counted_by_the_chosen_tokenizer(
    tmp_path: Path, reference_tokenizer: Path, choice: str
) -> None:
    """`--tokenizer PATH` counts a Chinese prompt as the model does; `estimate` by the rule."""
    from burstguard.tokenizer import load_tokenizer
    from burstguard.wire.tokens import count_tokens

    prompt = seed.PROMPT
    arg = str(reference_tokenizer) if choice == "tokenizer" else "estimate"
    model = "smollm2-135m-cpu"
    with start_emulator(tmp_path, "--tokenizer", arg, profile=model) as proc:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1}).encode()
        status, answer = post(proc.base_url, "/v1/completions", body)  # type: ignore[attr-defined]
    assert status == 200, answer
    real = load_tokenizer(reference_tokenizer).count(prompt)
    expected = real if choice == "tokenizer" else count_tokens(prompt)
    assert answer["usage"]["prompt_tokens"] == expected
