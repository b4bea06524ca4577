"""llama.cpp's server (llama-cpp-python) as a second real engine: one request at a time and
no /metrics, the weak backend a gateway meets in front of a small self-hosted model.

It honours `min_tokens` (not vLLM's `ignore_eos`), so fixed-length outputs ask for both."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import BURSTGUARD
from tests.integration.test_gateway import (
    INTERACTIVE_OVER_BATCH,
    ClassedStream,
    samples,
    start_gateway,
    stream_as,
)

from burstguard.engines import llama_cpp
from burstguard.scrape import metric_sum, parse_metrics
from burstguard.wire.summary import read_summary

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(600)]

MODEL = llama_cpp.MODEL_NAME


def fixed(n: int) -> dict[str, object]:
    """Exactly n output tokens on either engine."""
    return {"max_tokens": n, "min_tokens": n, "ignore_eos": True}


def test_engine_has_no_metrics_and_serves_the_openai_sdk(llama_cpp_server: str) -> None:
    """The official openai SDK against llama.cpp itself (plain and streamed), and the fact
    the gateway has to live with: no /metrics to read load from."""
    from openai import OpenAI

    c = OpenAI(base_url=llama_cpp_server + "/v1", api_key="none", max_retries=0)
    out = c.completions.create(model=MODEL, prompt="Once upon a time", extra_body=fixed(8))
    assert out.usage is not None and out.usage.completion_tokens == 8
    chunks = list(c.completions.create(
        model=MODEL, prompt="Once upon a time", stream=True, extra_body=fixed(6),
    ))  # fmt: skip
    assert sum(1 for ch in chunks if ch.choices and ch.choices[0].text) >= 5
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(llama_cpp_server + "/metrics", timeout=10)
    assert exc.value.code == 404


def test_gateway_serializes_and_orders_a_burst_for_llama_cpp(
    llama_cpp_server: str, tmp_path: Path
) -> None:
    """A burst of 6 batch then (0.15 s later) 6 interactive requests through `burstguard
    gateway` with one in flight (what this engine can do) and 8 queued: the gateway falls
    back to its caps (no engine metrics), never sends the engine a second request, sheds
    the newest batch requests with 429 + Retry-After, and serves every interactive request
    before the queued batch ones; through it the openai SDK streams as from the engine."""
    from openai import OpenAI

    config = {
        **INTERACTIVE_OVER_BATCH,
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "max_queue_requests": 8},
    }
    prompt = {"model": MODEL, "prompt": "Tell me a story about a cat.", "stream": True}
    # a batch answer (64 tokens, ~0.6 s here) still runs when the interactive wave comes
    bodies = {"batch": {**prompt, **fixed(64)}, "interactive": {**prompt, **fixed(16)}}

    async def burst(base: str) -> tuple[list[ClassedStream], float]:
        peak_in_flight = 0.0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = base + "/v1/completions"

            async def watch(done: asyncio.Event) -> None:
                nonlocal peak_in_flight
                while not done.is_set():
                    async with session.get(base + "/metrics") as r:
                        g = parse_metrics(await r.text())
                    now = metric_sum(g, "burstguard_in_flight_requests") or 0.0
                    peak_in_flight = max(peak_in_flight, now)
                    await asyncio.sleep(0.2)

            done = asyncio.Event()
            watcher = asyncio.create_task(watch(done))
            jobs = [stream_as(session, url, bodies["batch"], "batch") for _ in range(6)]
            jobs += [stream_as(session, url, bodies["interactive"], "interactive", 0.15)
                     for _ in range(6)]  # fmt: skip
            out = await asyncio.wait_for(asyncio.gather(*jobs), 300)
            done.set()
            await watcher
        return out, peak_in_flight

    with start_gateway(tmp_path, llama_cpp_server, config) as gw:
        base = gw.base_url  # type: ignore[attr-defined]
        results, peak = asyncio.run(burst(base))
        c = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        streamed = list(c.completions.create(
            model=MODEL, prompt="hello", stream=True, extra_body=fixed(5),
        ))  # fmt: skip
        assert sum(1 for ch in streamed if ch.choices and ch.choices[0].text) >= 4
    shed = [r for r in results if r.status == 429]
    served = sorted((r for r in results if r.status == 200), key=lambda r: r.first_token)
    order = "".join(r.cls[0] for r in served)  # i / b in first-token order
    spans = [(r.first_token, r.end) for r in served]
    overlap = max(a_end - b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    # fmt: off
    print(f"llama.cpp via gateway: served {len(served)} in order {order}, shed {len(shed)}, "
          f"peak in flight {peak:.0f}, worst overlap of consecutive streams {overlap:.3f} s")
    # fmt: on
    assert [r.cls for r in shed] == ["batch"] * 3 and all(r.retry_after for r in shed)
    assert order.count("i") == 6 and order.count("b") == 3
    # the first batch request was already on the engine; the 2 queued ones wait for all 6
    assert order.startswith("b") and order[1:7] == "iiiiii", order
    assert overlap <= 0.0  # one stream at a time: each starts after the previous one ended
    assert peak <= 1


def test_a_burst_is_cut_short_direct_and_completes_through_the_gateway(
    llama_cpp_server: str, tmp_path: Path
) -> None:
    """llama-cpp-python (interrupt_requests, its default) ends the running stream with
    [DONE] when another request arrives, so a burst of 6 sent straight to it loses most
    answers (bench counts a stream without a finish_reason as broken); the gateway with
    one in flight queues the burst and every answer completes."""
    shape = ["--pattern", "burst", "--burst-size", "6-6", "--idle", "60-60", "--duration", "2",
             "--prompt-tokens", "40", "--output-tokens", "24", "--quiet"]  # fmt: skip

    def bench(target: str, out: Path) -> dict[str, Any]:
        res = subprocess.run(
            [*BURSTGUARD, "bench", "--target", target, *shape, "--out", str(out)],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return read_summary(out / "summary.json")

    direct = bench(llama_cpp_server, tmp_path / "direct")
    config = {"admission": {"max_in_flight": 1, "min_in_flight": 1, "max_queue_requests": 16}}
    with start_gateway(tmp_path, llama_cpp_server, config) as gw:
        via = bench(gw.base_url, tmp_path / "via")  # type: ignore[attr-defined]
    # a gateway that lets the whole burst through sees the cuts too, and counts them failed
    config = {"admission": {"max_in_flight": 6, "adapt": False}}
    with start_gateway(tmp_path, llama_cpp_server, config) as gw:
        wide = bench(gw.base_url, tmp_path / "wide")  # type: ignore[attr-defined]
        counted = samples(gw.base_url)  # type: ignore[attr-defined]
    print(f"burst of 6 to llama.cpp: direct {direct['errors']} broken of {direct['requests']}, "
          f"via gateway {via['errors']} broken, TTFT p95 {via['ttft_s']['p95']:.2f} s; "
          f"through a gateway that lets 6 in flight {wide['errors']} broken")  # fmt: skip
    assert direct["requests"] == via["requests"] == wide["requests"] == 6
    assert direct["errors"] >= 3  # each new arrival cut the stream before it
    assert via["errors"] == 0 and via["completed"] == 6
    assert wide["errors"] >= 3
    failed = {k: v for k, v in counted.items() if k.startswith("llm_request_total{")
              and 'outcome="failed"' in k}  # fmt: skip
    assert sum(failed.values()) == wide["errors"], failed
    assert metric_sum(counted, "burstguard_upstream_errors_total") == wide["errors"]
