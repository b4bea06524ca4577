"""`burstguard gateway` in front of the real emulator: the openai SDK, bad input, shedding
with Retry-After, client disconnects, metrics, burstguard.client retries, schemathesis."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import BURSTGUARD, assert_openai_chat_works, start_emulator

from burstguard.client.retry import (
    RetryableFailure,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
)
from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import metric_sum, parse_metrics

MODEL = "llama3-8b-h100"
KEY_I = "key-interactive-0001"
KEY_B = "key-batch-000000002"
ONE_CLASS = [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}]


def start_gateway(
    tmp_path: Path, backend: str, config: dict[str, Any], **backend_options: Any
) -> ManagedProcess:
    """Writes `config` (plus the backend) to YAML and starts `burstguard gateway` on it."""
    port = free_port()
    path = tmp_path / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump({**config, "backends": [{"url": backend, **backend_options}]}))
    argv = [*BURSTGUARD, "gateway", "--config", str(path), "--port", str(port)]
    proc = ManagedProcess(
        argv, f"http://127.0.0.1:{port}/health", log_path=tmp_path / f"gateway-{port}.log"
    )
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


# Two classes, interactive strictly first, with deadlines no test burst reaches.
INTERACTIVE_OVER_BATCH: dict[str, Any] = {
    "default_class": "batch",
    "classes": [
        {"name": "interactive", "rank": 0, "queue_deadline_s": 120.0},
        {"name": "batch", "rank": 1, "queue_deadline_s": 120.0},
    ],
}


@dataclass
class ClassedStream:
    """One streamed answer as its client saw it (monotonic seconds)."""

    cls: str
    status: int
    sent: float
    first_token: float = 0.0
    end: float = 0.0
    retry_after: str | None = None

    @property
    def ttft(self) -> float:
        return self.first_token - self.sent


async def stream_as(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], cls: str, delay: float = 0.0
) -> ClassedStream:
    """Sends `body` streamed in priority class `cls` after `delay` and reads it to the end."""
    await asyncio.sleep(delay)
    out = ClassedStream(cls, 0, time.monotonic())
    async with session.post(url, json=body, headers={"x-burstguard-class": cls}) as r:
        out.status = r.status
        if r.status != 200:
            out.retry_after = r.headers.get("retry-after")
            return out
        async for line in r.content:
            if line.startswith(b"data: {") and not out.first_token:
                out.first_token = time.monotonic()
    out.end = time.monotonic()
    return out


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def post(base: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple:
    hdrs = {"content-type": "application/json", **(headers or {})}
    req = urllib.request.Request(base + path, data=body, method="POST", headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def samples(base: str) -> dict[str, float]:
    return parse_metrics(get(base + "/metrics"))


def wait_for(check: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def chat_body(max_tokens: int = 8, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens, "stream": stream, "ignore_eos": True, **extra}  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """Emulator (20x) behind a gateway with API keys and a 4 KiB body limit."""
    tmp = tmp_path_factory.mktemp("gw")
    emu = start_emulator(tmp, speedup=20.0)
    with emu:
        config = {
            "max_body_bytes": 4096,
            "api_keys": [
                {"key": KEY_I, "tenant": "acme", "tier": "interactive"},
                {"key": KEY_B, "tenant": "bulk", "tier": "batch"},
            ],
        }
        gw = start_gateway(tmp, emu.base_url, config)  # type: ignore[attr-defined]
        with gw:
            yield gw.base_url, emu.base_url, gw.log_path  # type: ignore[attr-defined,misc]


def test_openai_sdk_streaming_and_plain_through_the_gateway(stack: tuple[str, str, Path]) -> None:
    base, _, log_path = stack
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY_I, max_retries=0)
    assert_openai_chat_works(c, MODEL)
    text = c.completions.create(model=MODEL, prompt="abcd" * 25, max_tokens=3, stream=True,
                                extra_body={"ignore_eos": True})  # fmt: skip
    assert sum(1 for ch in text if ch.choices and ch.choices[0].text) == 3
    assert [m.id for m in c.models.list()] == [MODEL]
    with pytest.raises(openai.NotFoundError) as err:  # the backend's 404 passed through
        c.chat.completions.create(model="no-such-model", messages=[{"role": "user",
                                  "content": "x"}], max_tokens=2)  # fmt: skip
    assert err.value.status_code == 404

    s = samples(base)
    assert metric_sum(s, 'llm_request_total{class="interactive",outcome="completed"}') == 3
    assert metric_sum(s, 'llm_request_total{class="interactive",outcome="failed"}') == 1
    assert metric_sum(s, 'burstguard_output_tokens_total{class="interactive"}') == 22
    # the gateway's own share of each stream's first-token path: one per stream, under TTFT
    own = "burstguard_first_token_own_seconds"
    assert s[own + "_count"] == metric_sum(s, "burstguard_ttft_seconds_count") == 2
    assert 0 < s[own + "_sum"] < metric_sum(s, "burstguard_ttft_seconds_sum")
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    done = [x for x in lines if x["outcome"] == "completed"]
    assert len(done) >= 3
    assert set(done[0]) >= {"id", "class", "tenant", "outcome", "queue_wait_s", "ttft_s",
                            "prompt_tokens", "output_tokens"}  # fmt: skip
    streamed = [x for x in done if x["stream"]]
    assert streamed and all(x["ttft_s"] is not None for x in streamed)
    assert {x["output_tokens"] for x in done} == {12, 7, 3}
    assert all(x["tenant"] == "acme" and x["class"] == "interactive" for x in done)


def test_an_idle_client_connection_outlives_a_clients_pool(stack: tuple[str, str, Path]) -> None:
    """A client's pooled connection, idle 6 s, still serves: the gateway keeps idle
    connections longer than clients' pools do (aiohttp: 15 s), where uvicorn's default
    (5 s) closes them under a client that may be sending on them (lost requests)."""
    base, _, _ = stack
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for pause in (6.0, 0.0):
            conn.request("GET", "/v1/models", headers={"authorization": f"Bearer {KEY_I}"})
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read()
            time.sleep(pause)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b"{not json", {"authorization": f"Bearer {KEY_I}"}, 400, "invalid_request"),
        (b'{"model": "m"}', {"authorization": f"Bearer {KEY_I}"}, 400, "invalid_request"),
        (json.dumps(chat_body(max_tokens=0)).encode(), {"authorization": f"Bearer {KEY_I}"},
         400, "invalid_request"),
        (json.dumps(chat_body()).encode(), {}, 401, "invalid_api_key"),
        (json.dumps(chat_body()).encode(), {"authorization": "Bearer wrong-key-123"}, 401,
         "invalid_api_key"),
        (json.dumps(chat_body(user="x" * 5000)).encode(), {"authorization": f"Bearer {KEY_I}"},
         413, "request_too_large"),
    ],
)  # fmt: skip
def test_bad_input_gets_openai_errors(
    stack: tuple[str, str, Path], body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    base, _, _ = stack
    got, payload, _ = post(base, "/v1/chat/completions", body, headers)
    assert got == status
    assert payload["error"]["code"] == code
    assert set(payload["error"]) >= {"message", "type", "code"}


def test_token_id_prompts_pass_as_vllm_accepts_them(stack: tuple[str, str, Path]) -> None:
    """One schema for the emulator and the gateway: a prompt of token ids (vLLM's
    extension) is admitted, counted by its length and served; usage is exact."""
    base, _, _ = stack
    body = {"model": "llama3-8b-h100", "prompt": list(range(1, 41)), "max_tokens": 5,
            "ignore_eos": True}  # fmt: skip
    headers = {"authorization": f"Bearer {KEY_I}"}
    got, payload, _ = post(base, "/v1/completions", json.dumps(body).encode(), headers)
    assert got == 200, payload
    assert payload["usage"] == {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}


def test_metrics_carry_keda_names_and_classes(stack: tuple[str, str, Path]) -> None:
    base, _, _ = stack
    status, _, headers = post(
        base, "/v1/chat/completions", json.dumps(chat_body()).encode(),
        {"authorization": f"Bearer {KEY_B}"},
    )  # fmt: skip
    assert status == 200 and headers["x-burstguard-class"] == "batch"
    families = {f.name: f for f in text_string_to_metric_families(get(base + "/metrics"))}
    depth = families["llm_request_queue_depth"]
    assert {s.labels["class"] for s in depth.samples} == {"interactive", "standard", "batch"}
    total = families["llm_request"]  # the parser strips _total from counters
    labels = {(s.labels["class"], s.labels["outcome"]) for s in total.samples
              if s.name == "llm_request_total"}  # fmt: skip
    assert ("batch", "completed") in labels
    for name in ("burstguard_queue_wait_seconds", "burstguard_ttft_seconds",
                 "burstguard_in_flight_requests", "burstguard_burst_index",
                 "burstguard_arrival_rate", "burstguard_backend_kv_cache_usage"):  # fmt: skip
        assert name in families, name
    assert "burstguard_event_loop_lag_seconds" in families
    assert wait_for(lambda: samples(base).get("burstguard_event_loop_lag_seconds_count", 0) > 0)
    assert json.loads(get(base + "/ready"))["status"] == "ready"
    assert json.loads(get(base + "/openapi.json"))["openapi"].startswith("3.")


def test_schemathesis_finds_no_server_errors(stack: tuple[str, str, Path]) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    base, _, _ = stack
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    auth = {"authorization": f"Bearer {KEY_I}"}
    seen: list[int] = []

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=schema.as_strategy())
    def fuzz(case: Any) -> None:
        response = case.call(base_url=base, headers=auth, timeout=10)
        seen.append(response.status_code)
        assert response.status_code < 500, (case.path, case.body, response.text[:300])

    fuzz()
    assert len(seen) >= 20
    assert any(s == 200 for s in seen) and any(400 <= s < 500 for s in seen)


@pytest.fixture
def slow_stack(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Real-time emulator behind a gateway: 2 in flight, 4 queued, one class, no adaptation."""
    emu = start_emulator(tmp_path, speedup=1.0)
    with emu:
        config = {
            "classes": ONE_CLASS,
            "admission": {"max_in_flight": 2, "min_in_flight": 1, "max_queue_requests": 4,
                          "adapt": False},
        }  # fmt: skip
        gw = start_gateway(tmp_path, emu.base_url, config)  # type: ignore[attr-defined]
        with gw:
            yield gw.base_url, emu.base_url  # type: ignore[attr-defined]


def test_overload_burst_is_shed_at_once_with_retry_after(slow_stack: tuple[str, str]) -> None:
    base, emu = slow_stack
    n = 24
    body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 3000, "ignore_eos": True,
            "stream": True}  # fmt: skip

    async def burst() -> tuple[list[tuple[int, float, str | None, dict]], dict[str, float]]:
        out: list[tuple[int, float, str | None, dict]] = []
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            # warm n connections so the timing below is the gateway's, not TCP setup
            await asyncio.gather(*(session.get(base + "/health") for _ in range(n)))
            accepted: list[aiohttp.ClientResponse] = []

            async def one() -> None:
                t0 = time.perf_counter()
                resp = await session.post(base + "/v1/completions", json=body)
                took = time.perf_counter() - t0
                payload = {} if resp.status == 200 else await resp.json()
                out.append((resp.status, took, resp.headers.get("retry-after"), payload))
                if resp.status == 200:
                    accepted.append(resp)
                else:
                    resp.release()

            tasks = [asyncio.create_task(one()) for _ in range(n)]
            # the 2 in flight answer with stream headers, the n - 6 shed with 429 at once;
            # the 4 queued stay pending (no headers until they are released)
            deadline = time.monotonic() + 20
            while (len(out) < n - 4) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            during = parse_metrics(await (await session.get(base + "/metrics")).text())
            for t in tasks:  # hang up: the 4 queued and the 2 in flight get cancelled
                t.cancel()
            for resp in accepted:
                resp.close()
            await asyncio.gather(*tasks, return_exceptions=True)
        return out, during

    results, during = asyncio.run(burst())
    shed = [r for r in results if r[0] == 429]
    assert len([r for r in results if r[0] == 200]) == 2 and len(shed) == n - 6
    for _, took, retry_after, payload in shed:
        assert took < 0.050, f"429 after {took * 1000:.1f} ms"
        assert retry_after is not None and retry_after.isdigit() and int(retry_after) >= 1
        assert payload["error"]["code"] == "queue_full"
    assert metric_sum(during, "llm_request_queue_depth") == 4
    assert metric_sum(during, "burstguard_in_flight_requests") == 2

    def settled() -> bool:
        s = samples(base)
        return metric_sum(s, "llm_request_total") == n and not metric_sum(
            s, "burstguard_in_flight_requests"
        )

    assert wait_for(settled)
    s = samples(base)
    assert metric_sum(s, 'llm_request_total{class="standard",outcome="rejected"}') == n - 6
    assert metric_sum(s, 'llm_request_total{class="standard",outcome="cancelled"}') == 6
    assert wait_for(lambda: metric_sum(samples(emu), "vllm:num_requests_running") == 0)


def test_client_disconnect_frees_the_backend_and_the_queue(slow_stack: tuple[str, str]) -> None:
    base, emu = slow_stack
    body = {"model": MODEL, "prompt": "y" * 4000, "max_tokens": 3000, "ignore_eos": True}

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session:
            streams = []
            for _ in range(2):  # fill the in-flight cap with two streams
                resp = await session.post(base + "/v1/completions", json={**body, "stream": True})
                assert resp.status == 200
                await resp.content.readany()
                streams.append(resp)
            running = parse_metrics(await (await session.get(emu + "/metrics")).text())
            assert metric_sum(running, "vllm:num_requests_running") == 2
            queued = asyncio.ensure_future(session.post(base + "/v1/completions", json=body))
            await asyncio.sleep(0.3)
            gw = parse_metrics(await (await session.get(base + "/metrics")).text())
            assert metric_sum(gw, "llm_request_queue_depth") == 1
            queued.cancel()  # hang up while queued; once the gateway has noticed,
            deadline = time.monotonic() + 10
            while metric_sum(gw, "llm_request_queue_depth") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                gw = parse_metrics(await (await session.get(base + "/metrics")).text())
            assert metric_sum(gw, "llm_request_queue_depth") == 0
            for resp in streams:  # hang up while in flight
                resp.close()

    asyncio.run(scenario())
    assert wait_for(lambda: metric_sum(samples(emu), "vllm:num_requests_running") == 0)
    e = samples(emu)
    assert metric_sum(e, "burstguard_emulator_aborted_requests_total") == 2
    assert metric_sum(e, "vllm:kv_cache_usage_perc") == 0
    assert wait_for(lambda: metric_sum(samples(base), "llm_request_total") == 3)
    s = samples(base)
    assert metric_sum(s, 'llm_request_total{class="standard",outcome="cancelled"}') == 3
    assert metric_sum(s, "llm_request_queue_depth") == 0
    assert metric_sum(s, "burstguard_in_flight_requests") == 0


def test_clients_that_wait_as_told_mostly_get_in(tmp_path: Path) -> None:
    """An overload burst (~2.5x capacity for 2 s) with burstguard.client honouring Retry-After:
    every client is served in the end, and most retries succeed on their next try."""
    emu = start_emulator(tmp_path, speedup=2.0)
    with emu:
        config = {
            "classes": ONE_CLASS,
            "admission": {"max_in_flight": 4, "min_in_flight": 1, "max_queue_requests": 8,
                          "adapt": False, "rate_half_life_s": 2.0},
        }  # fmt: skip
        gw = start_gateway(tmp_path, emu.base_url, config)  # type: ignore[attr-defined]
        with gw:
            attempts = asyncio.run(_retrying_clients(gw.base_url))  # type: ignore[attr-defined]
    served = [a for a in attempts if a[-1] == 200]
    retries = [(a[i], a[i + 1]) for a in attempts for i in range(len(a) - 1) if a[i] == 429]
    next_ok = sum(1 for _, nxt in retries if nxt == 200)
    print(f"clients {len(attempts)}, served {len(served)}, retries {len(retries)}, "
          f"admitted on the next try {next_ok}")  # fmt: skip
    assert len(served) == len(attempts)
    assert retries, "the burst must overload the gateway"
    assert next_ok / len(retries) >= 0.6


async def _retrying_clients(base: str, n: int = 80, spread_s: float = 2.0) -> list[list[int]]:
    body = {"model": MODEL, "prompt": "z" * 200, "max_tokens": 48, "ignore_eos": True}
    policy = RetryPolicy(max_retries=8, base_s=0.05, cap_s=0.5, max_retry_after_s=30.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def client(i: int) -> list[int]:
            await asyncio.sleep(spread_s * i / n)
            seen: list[int] = []

            async def send(headers: dict[str, str]) -> int:
                url = base + "/v1/completions"
                async with session.post(url, json=body, headers=headers) as resp:
                    await resp.read()
                    seen.append(resp.status)
                    if resp.status != 200:
                        retry = parse_retry_after(resp.headers.get("retry-after"))
                        raise RetryableFailure(status=resp.status, retry_after_s=retry)
                    return resp.status

            with contextlib.suppress(RetryableFailure):
                await call_with_retries(send, policy)
            return seen

        return list(await asyncio.gather(*(client(i) for i in range(n))))
