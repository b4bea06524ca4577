"""Tenant quotas at a real `burstguard gateway` in front of an emulator, read by real
clients: the official `openai` SDK and burstguard's retry client.

Each test has its own tenant (its own buckets). The request bucket refills one request
every 2 s (burst 1), so whether a try is admitted does not depend on how many tokens the
emulator produced.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from tests.conftest import BURSTGUARD, start_emulator, start_fleet_gateway

from burstguard.client.retry import (
    RetryableFailure,
    RetryPolicy,
    call_with_retries,
    retry_after_from_headers,
)
from burstguard.procs import ManagedProcess

BODY = {"model": "llama3-8b-h100", "prompt": "hello " * 20, "max_tokens": 8}
SLOW = {"requests_per_second": 0.5, "burst_requests": 1, "tokens_per_minute": 60_000}
CONFIG = {
    "engine_speedup": 1.0,
    "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 60.0}],
    "quotas": {
        "tenants": {
            "raw": SLOW,
            "sdk": SLOW,
            "client": SLOW,
            "bench": SLOW,
            "glacial": {"requests_per_minute": 0.25, "burst_requests": 1},  # 240 s a request
        },
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("quotas")
    engine = start_emulator(tmp, speedup=20.0)
    with engine:
        gw: ManagedProcess = start_fleet_gateway(tmp, [engine.base_url], CONFIG)  # type: ignore[attr-defined]
        with gw:
            yield gw.base_url  # type: ignore[attr-defined]


async def _post(s: aiohttp.ClientSession, base: str, tenant: str) -> aiohttp.ClientResponse:
    async with s.post(base + "/v1/completions", json=BODY,
                      headers={"x-burstguard-tenant": tenant}) as resp:  # fmt: skip
        await resp.read()
        return resp


async def test_a_client_that_waits_exactly_the_retry_after_is_admitted(gateway: str) -> None:
    async with aiohttp.ClientSession() as s:
        first = await _post(s, gateway, "raw")
        refused = await _post(s, gateway, "raw")
        body = await refused.json()
        wait = retry_after_from_headers(refused.headers)
        assert wait is not None
        await asyncio.sleep(wait / 2)
        early = await _post(s, gateway, "raw")  # half the wait: still over quota
        await asyncio.sleep(retry_after_from_headers(early.headers) or 0.0)
        on_time = await _post(s, gateway, "raw")  # exactly the wait it was told
    assert first.status == 200
    for h in ("requests", "tokens"):  # OpenAI's six headers on a success
        assert first.headers[f"x-ratelimit-limit-{h}"]
        assert first.headers[f"x-ratelimit-remaining-{h}"]
        assert first.headers[f"x-ratelimit-reset-{h}"]
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.status == 429
    assert body["error"]["code"] == "quota_exceeded" and body["error"]["type"] == "requests"
    assert 1.5 < wait <= 2.0, wait  # the request bucket's refill (2 s), less the time since
    assert refused.headers["retry-after"] == "2"  # whole seconds, rounded up
    assert "x-should-retry" not in refused.headers
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert early.status == 429
    assert on_time.status == 200, await on_time.text()


def test_the_openai_sdk_waits_as_told_and_stops_past_its_cap(gateway: str) -> None:
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=2,
                           default_headers={"x-burstguard-tenant": "sdk"})  # fmt: skip
    client.completions.create(model=BODY["model"], prompt=BODY["prompt"], max_tokens=8)
    start = time.monotonic()
    raw = client.completions.with_raw_response.create(
        model=BODY["model"], prompt=BODY["prompt"], max_tokens=8
    )
    waited = time.monotonic() - start
    assert raw.http_response.status_code == 200
    assert 1.5 < waited < 5.0, waited  # one retry after retry-after-ms (~2 s), not backoff
    assert raw.headers["x-ratelimit-limit-requests"] == "1"

    glacial = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=2,
                            default_headers={"x-burstguard-tenant": "glacial"})  # fmt: skip
    glacial.completions.create(model=BODY["model"], prompt=BODY["prompt"], max_tokens=8)
    start = time.monotonic()
    with pytest.raises(openai.RateLimitError) as err:
        glacial.completions.create(model=BODY["model"], prompt=BODY["prompt"], max_tokens=8)
    assert time.monotonic() - start < 2.0  # no retry: 240 s is past the SDK's 120 s cap
    headers = err.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert 230 < float(headers["retry-after-ms"]) / 1000 <= 240


async def test_burstguards_retry_client_honours_the_quota(gateway: str) -> None:
    async with aiohttp.ClientSession() as s:
        tries: list[tuple[float, int]] = []

        async def send(headers: dict[str, str]) -> int:
            tenant = {**headers, "x-burstguard-tenant": "client"}
            async with s.post(gateway + "/v1/completions", json=BODY, headers=tenant) as r:
                await r.read()
                tries.append((time.monotonic(), r.status))
                if r.status != 200:
                    raise RetryableFailure.from_response(r.status, r.headers)
                return r.status

        policy = RetryPolicy(max_retries=3, base_s=0.01, cap_s=0.02)
        assert await call_with_retries(send, policy) == 200
        assert await call_with_retries(send, policy) == 200  # after exactly the wait
        statuses = [st for _, st in tries]
        assert statuses == [200, 429, 200], statuses
        assert 1.5 < tries[2][0] - tries[1][0] < 2.5  # the Retry-After, not the 10 ms backoff

        async def glacial(headers: dict[str, str]) -> int:
            tenant = {**headers, "x-burstguard-tenant": "glacial"}
            async with s.post(gateway + "/v1/completions", json=BODY, headers=tenant) as r:
                await r.read()
                if r.status != 200:
                    raise RetryableFailure.from_response(r.status, r.headers)
                return r.status

        with pytest.raises(RetryableFailure) as err:  # glacial's bucket is empty (SDK test)
            for _ in range(2):
                await call_with_retries(glacial, policy)
        assert err.value.should_retry is False and err.value.retry_after_s is not None
        assert math.isfinite(err.value.retry_after_s) and err.value.retry_after_s > 120


def test_diagnose_names_the_tenant_a_live_quota_refused(gateway: str, tmp_path: Path) -> None:
    """bench records each 429's OpenAI error code, so diagnose of a live run names the
    tenant over quota as it does for a simulated one."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*BURSTGUARD, "bench", "--quiet", "--target", gateway, "--pattern", "constant",
         "--rate", "4", "--duration", "3", "--tenants", "bench=1", "--prompt-tokens", "16",
         "--output-tokens", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    diag = subprocess.run([*BURSTGUARD, "diagnose", str(out), "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert diag.returncode == 0, diag.stderr
    over = json.loads(diag.stdout)["over_quota"]
    assert [q["tenant"] for q in over] == ["bench"] and over[0]["refused_requests"] >= 5, over
