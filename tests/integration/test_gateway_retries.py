"""Retry signals at the gateway: the openai SDK's and burstguard bench's retries against a
shedding gateway (in front of the real emulator) show up in
`burstguard_retried_requests_total`, and every 429's Retry-After in
`burstguard_retry_after_seconds`, per class, exactly as the clients saw them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import openai
from tests.conftest import BURSTGUARD, start_emulator
from tests.integration.test_gateway import INTERACTIVE_OVER_BATCH, MODEL, samples, start_gateway

from burstguard.client import RETRY_COUNT_HEADER
from burstguard.scrape import metric_sum

# one request at a time and one waiting: a burst of 12 is mostly shed (queue_full)
SATURATED = {
    **INTERACTIVE_OVER_BATCH,
    "admission": {"max_in_flight": 1, "min_in_flight": 1, "max_queue_requests": 1,
                  "adapt": False},
}  # fmt: skip
CLIENTS = 12


class Seen:
    """Every try as the SDK sent it and its answer: (class, retry count sent, status,
    Retry-After)."""

    def __init__(self) -> None:
        self.tries: list[tuple[str, str, int, str | None]] = []
        self._lock = threading.Lock()

    def on_response(self, response: httpx2.Response) -> None:
        h = response.request.headers
        entry = (h["x-burstguard-class"], h[RETRY_COUNT_HEADER], response.status_code,
                 response.headers.get("retry-after"))  # fmt: skip
        with self._lock:
            self.tries.append(entry)


def _sdk_burst(base: str, seen: Seen) -> None:
    """CLIENTS chats at once, half per class, each SDK client retrying twice as it does by
    default (honouring Retry-After)."""
    clients = {
        cls: openai.OpenAI(
            base_url=base + "/v1",
            api_key="unused",
            max_retries=2,
            timeout=30.0,
            default_headers={"x-burstguard-class": cls},
            http_client=openai.DefaultHttpxClient(event_hooks={"response": [seen.on_response]}),
        )
        for cls in ("interactive", "batch")
    }

    def chat(i: int) -> None:
        client = clients["interactive" if i % 2 else "batch"]
        with contextlib.suppress(openai.RateLimitError):  # retries spent: each try was seen
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=24,
                extra_body={"ignore_eos": True},
            )  # fmt: skip

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(chat, range(CLIENTS)))


def test_sdk_and_bench_retries_and_every_retry_after_are_counted(tmp_path: Path) -> None:
    emu = start_emulator(tmp_path, speedup=4.0)
    with emu:
        gw = start_gateway(tmp_path, emu.base_url, SATURATED)  # type: ignore[attr-defined]
        with gw:
            base: str = gw.base_url  # type: ignore[attr-defined]
            seen = Seen()
            _sdk_burst(base, seen)
            sdk = samples(base)
            bench = _bench_with_retries(base, tmp_path / "bench")
            after = samples(base)

    sent_retries = Counter(c for c, n, _, _ in seen.tries if n != "0")
    shed = [(c, int(ra)) for c, _, status, ra in seen.tries if status == 429 and ra]
    print(f"SDK tries {len(seen.tries)}, retries {dict(sent_retries)}, 429s {len(shed)}")
    assert sum(sent_retries.values()) > 0, "the burst must make the SDK retry"
    assert len(shed) == sum(1 for t in seen.tries if t[2] == 429), "every 429 has Retry-After"
    for cls in ("interactive", "batch"):
        retried = metric_sum(sdk, f'burstguard_retried_requests_total{{class="{cls}"}}') or 0
        assert retried == sent_retries[cls]
        told = [ra for c, ra in shed if c == cls]
        hist = f'burstguard_retry_after_seconds_%s{{class="{cls}"}}'
        assert metric_sum(sdk, hist % "count") == len(told)
        assert metric_sum(sdk, hist % "sum") == sum(told)
        le_2 = f'burstguard_retry_after_seconds_bucket{{class="{cls}",le="2.0"}}'
        assert metric_sum(sdk, le_2) == sum(1 for ra in told if ra <= 2)
    assert metric_sum(sdk, "burstguard_rejections_total") == len(shed)

    # burstguard bench --retry marks its retries the same way
    new_retries = metric_sum(after, "burstguard_retried_requests_total") - sum(
        sent_retries.values()
    )
    new_shed = metric_sum(after, "burstguard_retry_after_seconds_count") - len(shed)
    retries, bench_429s = bench
    print(f"bench: {retries} retries, {bench_429s} 429s; "
          f"gateway: {new_retries} retried, {new_shed} 429s")  # fmt: skip
    assert retries > 0
    assert new_retries == retries
    assert new_shed == bench_429s


def _bench_with_retries(base: str, out: Path) -> tuple[int, int]:
    """A 2 s burst from `burstguard bench --retry exponential`: its retries and 429s."""
    argv = [*BURSTGUARD, "bench", "--target", base, "--pattern", "burst", "--rate", "8",
            "--duration", "2", "--burst-size", "12-12", "--idle", "1-1", "--seed", "1",
            "--prompt-tokens", "uniform:50-100", "--output-tokens", "uniform:16-24",
            "--retry", "exponential", "--max-retries", "2", "--retry-cap", "1",
            "--timeout", "30", "--out", str(out), "--quiet", "--force"]  # fmt: skip
    subprocess.run(argv, check=True, timeout=120, capture_output=True)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    statuses = [s for r in records for s in [*(a["status"] for a in r["attempts"]), r["status"]]]
    return sum(r["retries"] for r in records), statuses.count(429)
