"""The gateway tried as an attacker would, on raw sockets (issue 19): no unauthenticated
client can grow its memory, hold its connections or make it answer 500.

Every attack is bounded in bytes and in time. Where the harm is memory, the assertion is on
the gateway process's own RSS (/proc/PID/status) and on /health answering meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import BURSTGUARD, raw_backend, start_emulator, start_fleet_gateway
from tests.integration.test_gateway import start_gateway

from burstguard.procs import ManagedProcess, free_port
from burstguard.scrape import metric_sum, parse_metrics

MODEL = "llama3-8b-h100"
KEY = "key-hardening-0001"
METRICS_KEY = "metrics-key-hardening-0001"
MIB = 1 << 20
RSS_GROWTH_LIMIT = 4 * MIB
HEALTH_LIMIT_S = 0.100


# -- helpers ----------------------------------------------------------------------------


def address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def connect(base: str, rcvbuf: int | None = None, timeout_s: float = 5.0) -> socket.socket:
    """A raw client socket; a small `rcvbuf` makes a client that does not read fill up fast."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout_s)
    s.connect(address(base))
    return s


def read_until(s: socket.socket, done: Callable[[bytes], bool], timeout_s: float) -> bytes:
    """Reads until `done(what was read)`, the peer closes, or the time is up."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while not done(out) and (left := deadline - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            got = s.recv(65536)
        except TimeoutError:
            break
        if not got:
            break
        out += got
    return out


def closed_by_peer(s: socket.socket, timeout_s: float) -> tuple[bool, bytes]:
    """(whether the peer closed within the time, what it sent before)."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        s.settimeout(left)
        try:
            got = s.recv(65536)
        except TimeoutError:
            return False, out
        except ConnectionResetError:
            return True, out
        if not got:
            return True, out
        out += got
    return False, out


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


def refused(base: str, reason: str) -> float:
    return metrics(base).get(f'burstguard_connections_refused_total{{reason="{reason}"}}', 0.0)


def status_of(response: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", response)
    assert match, response[:200]
    return int(match.group(1))


def error_of(response: bytes) -> dict[str, Any]:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])["error"]


def whole_json(out: bytes) -> bool:
    """A complete answer with a content-length (the first on the connection)."""
    head, sep, body = out.partition(b"\r\n\r\n")
    found = re.search(rb"content-length: (\d+)", head)
    return bool(sep and found and len(body) >= int(found.group(1)))


class Watch:
    """While an attack runs: /health on its own keep-alive connection every 50 ms, each
    answer timed, and the gateway's RSS sampled; `__exit__` stops and reports."""

    def __init__(self, base: str, pid: int) -> None:
        self._base, self._pid = base, pid
        self.health_s: list[float] = []
        self.rss_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with connect(self._base) as s:
            while not self._stop.is_set():
                t0 = time.monotonic()
                s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                out = read_until(s, lambda b: b.endswith(b'{"status":"ok"}'), 2.0)
                self.health_s.append(time.monotonic() - t0 if out.endswith(b"}") else 2.0)
                self.rss_peak = max(self.rss_peak, rss_bytes(self._pid))
                self._stop.wait(0.05)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 3  # an attack refused at once still gets its probes
        while len(self.health_s) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        self._stop.set()
        self._thread.join(5)


def settled_rss(pid: int, base: str) -> int:
    """RSS after the gateway has served a few requests of every kind the attacks use."""
    for _ in range(20):
        for path in ("/health", "/openapi.json", "/metrics"):
            urllib.request.urlopen(base + path, timeout=5).read()
    time.sleep(0.2)
    return rss_bytes(pid)


def assert_unharmed(watch: Watch, before: int) -> None:
    grew = watch.rss_peak - before
    assert grew < RSS_GROWTH_LIMIT, f"the gateway's RSS grew by {grew / MIB:.1f} MiB"
    assert watch.health_s, "no /health probes ran during the attack"
    worst = max(watch.health_s)
    assert worst < HEALTH_LIMIT_S, f"/health took {worst * 1e3:.0f} ms during the attack"


# -- fixtures ---------------------------------------------------------------------------


LIMITS = {"head_timeout_s": 1.0, "body_timeout_s": 1.0, "linger_s": 1.0}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path, str]]:
    """A gateway (1 s head and body deadlines, default sizes) in front of the emulator at
    1x; yields (its address, its pid, its log, the emulator's address)."""
    tmp = tmp_path_factory.mktemp("hardening")
    with start_emulator(tmp, speedup=1.0) as emu:
        gw = start_gateway(tmp, emu.base_url, {"limits": LIMITS})  # type: ignore[attr-defined]
        with gw:
            assert gw.proc is not None
            yield gw.base_url, gw.proc.pid, Path(gw.log_path), emu.base_url  # type: ignore[attr-defined]


def completion(max_tokens: int, stream: bool = False, **extra: Any) -> bytes:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": max_tokens, "stream": stream}
    return json.dumps({**body, **extra}).encode()


def post(path: str, body: bytes, headers: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{headers}"
            f"content-length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip


# -- 1: the write side ------------------------------------------------------------------


def test_1_a_client_that_pipelines_and_never_reads_cannot_grow_the_gateway(
    stack: tuple[str, int, Path, str],
) -> None:
    """3,000 pipelined GET /openapi.json (7.6 KB answers for 40-byte requests), none read."""
    base, pid, _, _ = stack
    before = settled_rss(pid, base)
    batch = b"GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n" * 5
    with connect(base, rcvbuf=4096, timeout_s=0.5) as attacker, Watch(base, pid) as watch:
        for _ in range(600):  # in small batches: one read never holds more than a few
            try:
                attacker.sendall(batch)
            except TimeoutError:
                break  # the gateway stopped reading: what a full client should get
            time.sleep(0.002)
        time.sleep(0.5)
    assert_unharmed(watch, before)


def test_1_many_pipelined_requests_in_one_write_are_all_answered_in_order(
    stack: tuple[str, int, Path, str],
) -> None:
    """Flow control queues what a client pipelines (max_pipelined parsed, the rest left
    unread), it does not refuse it: 500 requests in one write, 500 answers."""
    base, _, _, _ = stack
    paths = [b"/health", b"/nowhere"] * 250
    with connect(base) as s:
        s.sendall(b"".join(b"GET %b HTTP/1.1\r\nhost: x\r\n\r\n" % p for p in paths))
        out = read_until(s, lambda b: b.count(b"HTTP/1.1 ") >= len(paths) and b.endswith(b"}"),
                         10.0)  # fmt: skip
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", out)
    assert statuses == [b"200", b"404"] * 250


# -- 2: a head that never ends ----------------------------------------------------------


def test_2_a_header_line_that_never_ends_is_refused_at_the_head_limit(
    stack: tuple[str, int, Path, str],
) -> None:
    """`x-big: ` and then up to 16 MiB without a CRLF, 64 KiB at a time."""
    base, pid, _, _ = stack
    before = settled_rss(pid, base)
    refused_before = refused(base, "head_too_large")
    piece, sent, answer = b"a" * 65536, 0, b""
    with connect(base, timeout_s=2.0) as attacker, Watch(base, pid) as watch:
        attacker.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ")
        while sent < 16 * MIB and not answer:
            try:
                attacker.sendall(piece)
            except (TimeoutError, OSError):
                break
            sent += len(piece)
            attacker.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                answer = attacker.recv(65536)
            attacker.settimeout(2.0)
        answer += read_until(attacker, lambda b: b.endswith(b"}}"), 2.0)
    assert status_of(answer) == 431 and error_of(answer)["code"] == "bad_request"
    # what was sent by then lies mostly in the kernel's socket buffers, not in the gateway
    assert sent < 8 * MIB, f"the 431 came only after {sent / MIB:.1f} MiB"
    assert refused(base, "head_too_large") == refused_before + 1
    assert_unharmed(watch, before)


def test_2_too_many_header_lines_are_refused(stack: tuple[str, int, Path, str]) -> None:
    """1,000 tiny header lines: 6 KB, under the byte limit, over the line limit (100)."""
    base, _, _, _ = stack
    with connect(base) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + b"a: 1\r\n" * 1000 + b"\r\n")
        out = read_until(s, lambda b: b.endswith(b"}}"), 5.0)
    assert status_of(out) == 431
    assert "header lines" in error_of(out)["message"]


# -- 3: slowloris, connection cap --------------------------------------------------------


def trickle(s: socket.socket, data: bytes, every_s: float, for_s: float) -> bytes:
    """Sends `data` a byte at a time; returns what came back (empty if nothing did)."""
    deadline = time.monotonic() + for_s
    for byte in data:
        if time.monotonic() > deadline:
            break
        try:
            s.sendall(bytes([byte]))
        except OSError:
            break
        s.setblocking(False)
        try:
            got = s.recv(65536)
        except BlockingIOError:
            got = b""
        except OSError:
            break
        s.settimeout(2.0)
        if got:
            return got + read_until(s, lambda b: b.endswith(b"}}"), 2.0)
        time.sleep(every_s)
    return read_until(s, lambda b: b.endswith(b"}}"), 0.1)


@pytest.mark.parametrize(
    ("opening", "trickled", "reason"),
    [
        (b"GET /health HTTP/1.1\r\n", b"host: slowly-slowly-slowly\r\n\r\n", "head_timeout"),
        (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{", b"x" * 99,
         "body_timeout"),
    ],
)  # fmt: skip
def test_3_a_trickled_request_gets_408_at_its_deadline(
    stack: tuple[str, int, Path, str], opening: bytes, trickled: bytes, reason: str
) -> None:
    """One byte every 0.2 s: each within any gap timeout, the whole never within 1 s."""
    base, _, _, _ = stack
    before = refused(base, reason)
    with connect(base) as s:
        t0 = time.monotonic()
        s.sendall(opening)
        out = trickle(s, trickled, every_s=0.2, for_s=4.0)
        took = time.monotonic() - t0
        closed, _ = closed_by_peer(s, 2.0)
    assert out, "the gateway kept the trickling connection open"
    assert status_of(out) == 408 and 0.9 < took < 2.5
    assert closed
    assert refused(base, reason) == before + 1


def test_3_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(
    stack: tuple[str, int, Path, str],
) -> None:
    base, _, _, _ = stack
    with connect(base) as s:
        closed, out = closed_by_peer(s, 3.0)
    assert closed and out == b""


def test_3_connections_beyond_max_connections_are_closed_at_once(tmp_path: Path) -> None:
    with start_gateway(tmp_path, f"http://127.0.0.1:{free_port()}",  # type: ignore[attr-defined]
                       {"limits": {"max_connections": 4}}) as gw:  # fmt: skip
        base = gw.base_url  # type: ignore[attr-defined]
        held = [connect(base) for _ in range(4)]
        try:
            time.sleep(0.2)
            with connect(base) as extra:
                closed, _ = closed_by_peer(extra, 2.0)
            assert closed, "a connection beyond max_connections was kept"
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 5
        while True:  # the held ones are seen closed, then there is room again
            try:
                counted = metrics(base)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    assert counted['burstguard_connections_refused_total{reason="max_connections"}'] >= 1


# -- 4: a client that stops reading a stream ---------------------------------------------


@pytest.fixture(scope="module")
def fast_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A gateway with a 1 s backend read timeout, a 4 s send timeout and 2 s keep-alive, in
    front of the instant emulator (streams as fast as the CPUs allow); yields (gateway,
    emulator)."""
    tmp = tmp_path_factory.mktemp("hardening-fast")
    with start_emulator(tmp, profile="instant") as emu:
        engine = emu.base_url  # type: ignore[attr-defined]
        port = free_port()
        path = tmp / "gateway.yaml"
        backend = {"url": engine, "read_timeout_s": 1.0}
        config = {"limits": {"send_timeout_s": 4.0, "keep_alive_s": 2.0}, "backends": [backend]}
        path.write_text(yaml.safe_dump(config))
        argv = [*BURSTGUARD, "gateway", "--config", str(path), "--port", str(port)]
        base = f"http://127.0.0.1:{port}"
        with ManagedProcess(argv, base + "/health", log_path=tmp / "gateway.log"):
            yield base, engine


def stream_request(tokens: int) -> bytes:
    body = completion(tokens, stream=True, ignore_eos=True, model="instant")
    return post("/v1/completions", body)


def wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_4_a_client_that_stops_reading_a_stream_is_cut_and_the_engine_freed(
    fast_stack: tuple[str, str],
) -> None:
    base, engine = fast_stack
    before = metrics(base)
    with connect(base, rcvbuf=4096) as s:
        s.sendall(stream_request(120_000))
        assert read_until(s, lambda b: b"data:" in b, 5.0).startswith(b"HTTP/1.1 200 OK")

        def cut() -> bool:
            now = metrics(base)
            return now.get('llm_request_total{class="standard",outcome="cancelled"}', 0) > (
                before.get('llm_request_total{class="standard",outcome="cancelled"}', 0)
            )

        assert wait_for(cut, 20.0), "the stalled stream was not cancelled"
    after = metrics(base)
    assert refused(base, "client_stalled") == 1
    assert after["burstguard_in_flight_requests"] == 0
    assert after.get('llm_request_total{class="standard",outcome="failed"}', 0) == before.get(
        'llm_request_total{class="standard",outcome="failed"}', 0
    ), "the client's stall was blamed on the backend"

    def engine_idle() -> bool:
        with urllib.request.urlopen(engine + "/metrics", timeout=5) as r:
            text = r.read().decode()
        return metric_sum(parse_metrics(text), "vllm:num_requests_running") == 0

    assert wait_for(engine_idle, 5.0), "the engine still runs the cut stream"


def test_4_a_client_pausing_longer_than_the_backend_read_timeout_is_not_blamed_on_it(
    fast_stack: tuple[str, str],
) -> None:
    """The client reads nothing for 2.5 s (backend read timeout 1 s, send timeout 4 s)."""
    base, _ = fast_stack
    tokens = 40_000  # ~7 MB of events: more than the socket buffers hold
    end = b"data: [DONE]\n\n\r\n0\r\n\r\n"
    with connect(base, rcvbuf=4096, timeout_s=10) as s:
        s.sendall(stream_request(tokens))
        tail = read_until(s, lambda b: b"data:" in b, 5.0)
        time.sleep(2.5)
        deadline = time.monotonic() + 60
        while not tail.endswith(b"\r\n0\r\n\r\n") and time.monotonic() < deadline:  # a tail:
            got = s.recv(65536)  # O(n) in the stream's length
            if not got:
                break
            tail = (tail + got)[-4096:]
    assert b'"error"' not in tail, tail
    assert tail.endswith(end), tail[-300:]


def test_4_a_connection_whose_answer_was_read_slowly_still_closes_when_idle(
    fast_stack: tuple[str, str],
) -> None:
    """A stream that ended while its client was not reading (the gateway's writes, and its
    reads, paused): the connection still closes once idle for keep_alive_s (counted from
    the answer's end, as before: what is left in the buffer is written before the close)."""
    base, _ = fast_stack
    end = b"data: [DONE]\n\n\r\n0\r\n\r\n"
    with connect(base, rcvbuf=4096) as s:
        s.sendall(stream_request(2000))  # ~340 KB
        time.sleep(1.0)  # the engine is done long before
        tail = b""
        while not tail.endswith(end):
            got = s.recv(65536)
            assert got, tail[-300:]
            tail = (tail + got)[-4096:]
        t0 = time.monotonic()
        closed, _ = closed_by_peer(s, 5.0)
    assert closed and time.monotonic() - t0 < 3.5


# -- 5: pipelined bodies ----------------------------------------------------------------


def test_5_pipelined_bodies_are_not_buffered(
    stack: tuple[str, int, Path, str], tmp_path: Path
) -> None:
    """Behind a ~4 s request, three pipelined POSTs of 8 MiB bodies (the body limit here):
    while the first is served, the gateway holds none of them beyond one read."""
    _, _, _, engine = stack
    with start_gateway(tmp_path, engine, {"max_body_bytes": 8 * MIB}) as gw:  # type: ignore[attr-defined]
        base, pid = gw.base_url, gw.proc.pid  # type: ignore[attr-defined]
        before = settled_rss(pid, base)
        big = b'{"model": "m", "prompt": "' + b"a" * (8 * MIB - 64) + b'"}'
        with connect(base, timeout_s=0.5) as attacker, Watch(base, pid) as watch:
            attacker.sendall(post("/v1/completions", completion(600, ignore_eos=True)))
            for _ in range(3):
                try:
                    attacker.sendall(post("/v1/completions", big))
                except TimeoutError:
                    break  # the gateway stopped reading
            time.sleep(1.0)
        assert_unharmed(watch, before)


# -- 6: malformed JSON ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"[" * 5000, b'{"model": "m", "prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}",
     b'{"model": "m", "prompt": "hi", "x": ' + b'{"a": ' * 1500 + b"1" + b"}" * 1501,
     b"\xff\xfe not utf-8"],
    ids=["deep-array", "5000-digit-int", "deep-object", "not-utf8"],
)  # fmt: skip
def test_6_a_body_the_json_parser_refuses_is_a_400(
    stack: tuple[str, int, Path, str], body: bytes
) -> None:
    base, _, log, _ = stack
    with connect(base) as s:
        s.sendall(post("/v1/completions", body, "connection: close\r\n"))
        out = read_until(s, lambda b: False, 5.0)
    assert status_of(out) == 400, out[:300]
    assert error_of(out)["type"] == "invalid_request_error"
    time.sleep(0.2)
    assert "Traceback" not in log.read_text(errors="replace")


# -- 7: Expect: 100-continue ------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """A gateway with one API key in front of the emulator at 1x, its /metrics on a second
    listener behind a metrics key; yields (its address, its metrics listener's, the
    emulator's)."""
    tmp = tmp_path_factory.mktemp("hardening-keyed")
    with start_emulator(tmp, speedup=1.0) as emu:
        metrics_port = free_port()
        config = {"api_keys": [{"key": KEY, "tenant": "t", "tier": "standard"}],
                  "metrics": {"listen": {"host": "127.0.0.1", "port": metrics_port},
                              "api_key": METRICS_KEY}}  # fmt: skip
        with start_gateway(tmp, emu.base_url, config) as gw:  # type: ignore[attr-defined]
            yield gw.base_url, f"http://127.0.0.1:{metrics_port}", emu.base_url  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def keyed(keyed_gateway: tuple[str, str, str]) -> str:
    return keyed_gateway[0]


def test_7_100_continue_comes_in_its_turn_after_the_answers_before_it(keyed: str) -> None:
    auth = f"authorization: Bearer {KEY}\r\n"
    first = post("/v1/completions", completion(30, stream=True), auth)
    second = completion(2)
    head = post("/v1/completions", second, auth + "expect: 100-continue\r\n")[: -len(second)]
    with connect(keyed) as s:
        s.sendall(first + head)  # pipelined: the second's head arrives during the first
        out = read_until(s, lambda b: b"100 Continue" in b, 5.0)
        before, sep, _ = out.partition(b"HTTP/1.1 100 Continue\r\n\r\n")
        assert sep, out[-300:]
        assert before.startswith(b"HTTP/1.1 200 OK")
        assert before.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), "100 inside the stream"
        s.sendall(second)
        answer = read_until(s, whole_json, 5.0)
    assert status_of(answer) == 200


def test_7_a_bad_key_gets_401_and_no_100(keyed: str) -> None:
    body = completion(2)
    head = post("/v1/completions", body, "authorization: Bearer wrong-key-000\r\n"
                "expect: 100-continue\r\n")[: -len(body)]  # fmt: skip
    with connect(keyed) as s:
        s.sendall(head)
        out = read_until(s, lambda b: b.endswith(b"}}"), 5.0)
        closed, _ = closed_by_peer(s, 3.0)
    assert status_of(out) == 401, out[:100]
    assert error_of(out)["code"] == "invalid_api_key"
    assert closed


# -- 8: an answer delimited by the backend's close ---------------------------------------


@pytest.fixture
async def closing_backend() -> AsyncIterator[str]:
    """Answers with neither content-length nor chunking: the body ends when it closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))  # fmt: skip
        request = json.loads(await reader.readexactly(length))
        if request.get("stream"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            for text, finish in (("a", None), ("b", "length")):
                choice = {"index": 0, "text": text, "finish_reason": finish}
                writer.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
                await writer.drain()
                await asyncio.sleep(0.02)
            writer.write(b"data: [DONE]\n\n")
        else:
            answer = {"choices": [{"index": 0, "text": "ab", "finish_reason": "length"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 2}}  # fmt: skip
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n")
            writer.write(json.dumps(answer).encode())
        await writer.drain()
        writer.close()

    async with raw_backend(handle) as url:
        yield url


async def test_8_a_backend_answer_ended_by_close_is_a_whole_answer(
    closing_backend: str, tmp_path: Path
) -> None:
    gw = start_gateway(tmp_path, closing_backend, {})
    await asyncio.to_thread(gw.__enter__)
    try:
        base = gw.base_url  # type: ignore[attr-defined]
        plain = await asyncio.to_thread(_exchange, base, completion(2))
        streamed = await asyncio.to_thread(_exchange, base, completion(2, stream=True))
        counted = await asyncio.to_thread(metrics, base)
    finally:
        await asyncio.to_thread(gw.stop)
    assert status_of(plain) == 200, plain[:300]
    assert json.loads(plain.split(b"\r\n\r\n", 1)[1])["usage"]["completion_tokens"] == 2
    assert status_of(streamed) == 200
    events = [e for e in streamed.split(b"\r\n\r\n", 1)[1].split(b"\n\n") if b"data:" in e]
    assert events[-1].endswith(b"data: [DONE]") and b'"error"' not in streamed
    assert counted['llm_request_total{class="standard",outcome="completed"}'] == 2
    assert metric_sum(counted, "burstguard_upstream_errors_total") in (None, 0)


def _exchange(base: str, body: bytes) -> bytes:
    with connect(base) as s:
        s.sendall(post("/v1/completions", body, "connection: close\r\n"))
        return read_until(s, lambda b: False, 5.0)


# -- 9: closing, and what a client is told -----------------------------------------------


def test_9_an_answer_before_an_unread_body_is_read_not_reset(
    stack: tuple[str, int, Path, str],
) -> None:
    """A 413 decided from the head while the client still sends its body and has not yet
    read an earlier answer (so the answers wait in the gateway's socket): a close with the
    body unread would reset the connection and drop them."""
    base, _, _, _ = stack
    head = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % (8 * MIB))  # fmt: skip
    with connect(base, rcvbuf=4096, timeout_s=0.5) as s:
        s.sendall(b"GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n" + head)
        time.sleep(0.2)  # both answered, the 413 closing the connection
        with contextlib.suppress(OSError):
            for _ in range(4):
                s.sendall(b"a" * 65536)
        try:
            out = read_until(s, lambda b: b.endswith(b"}}"), 3.0)
        except ConnectionResetError:
            pytest.fail("the connection was reset before the answers were read")
    first, second = re.findall(rb"HTTP/1\.1 (\d{3}) ", out)
    assert (first, second) == (b"200", b"413")
    assert json.loads(out.rsplit(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_too_large"


def test_9_clients_are_not_told_the_backends_address(tmp_path: Path) -> None:
    port = free_port()
    with start_gateway(tmp_path, f"http://127.0.0.1:{port}", {}) as gw:  # type: ignore[attr-defined]
        base = gw.base_url  # type: ignore[attr-defined]
        answers = [_exchange(base, completion(2))]
        with connect(base) as s:
            s.sendall(b"GET /ready HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answers.append(read_until(s, lambda b: False, 5.0))
            s.close()
        with connect(base) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answers.append(read_until(s, lambda b: False, 5.0))
    for out in answers:
        assert status_of(out) == 503, out[:200]
        assert str(port).encode() not in out and b"127.0.0.1" not in out, out


@pytest.fixture
async def failing_backend() -> AsyncIterator[str]:
    """Answers 500 with a Python traceback for a body, as a crashing server might."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))  # fmt: skip
        await reader.readexactly(length)
        body = (b'Traceback (most recent call last):\n  File "/srv/secret/engine.py", '
                b"line 7, in generate\nKeyError: 'kv'\n")  # fmt: skip
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
                     b"content-length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
        await writer.drain()
        writer.close()

    async with raw_backend(handle) as url:
        yield url


async def test_9_a_backends_traceback_is_logged_not_passed_on(
    failing_backend: str, tmp_path: Path
) -> None:
    gw: ManagedProcess = start_gateway(tmp_path, failing_backend, {})
    await asyncio.to_thread(gw.__enter__)
    try:
        out = await asyncio.to_thread(_exchange, gw.base_url, completion(2))  # type: ignore[attr-defined]
    finally:
        await asyncio.to_thread(gw.stop)
    assert status_of(out) == 502
    err = error_of(out)
    assert err["code"] == "backend_500" and "Traceback" not in err["message"]
    assert b"secret" not in out
    assert "/srv/secret/engine.py" in Path(gw.log_path).read_text()  # type: ignore[arg-type]


@pytest.fixture
async def not_json_backend() -> AsyncIterator[str]:
    """Answers every POST 200 with a body that is not JSON (a wrong or broken server);
    its /health answers, so only the requests can find it out."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                if length:
                    await reader.readexactly(int(length.group(1)))
                body = b"<html>hello</html>" if head.startswith(b"POST") else b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
                await writer.drain()

    async with raw_backend(handle) as url:
        yield url


async def test_9_a_200_that_is_not_json_fails_over_or_is_a_502(
    not_json_backend: str, emulator: str, tmp_path: Path
) -> None:
    """It was passed on as a 200 (the client's JSON parser then failed). Now it is a
    backend failure (`bad_answer`): with another backend the client gets that one's
    answer, alone the client gets 502 in the OpenAI error shape."""
    cfg = {"fleet": {"router": {"policy": "round_robin"}}}
    for backends, want in (([not_json_backend, emulator], 200), ([not_json_backend], 502)):
        gw = start_fleet_gateway(tmp_path, backends, cfg)
        await asyncio.to_thread(gw.__enter__)
        try:
            outs = [await asyncio.to_thread(_exchange, gw.base_url, completion(2))  # type: ignore[attr-defined]
                    for _ in range(4)]  # fmt: skip
        finally:
            await asyncio.to_thread(gw.stop)
        for out in outs:
            assert status_of(out) == want, out[:300]
            body = json.loads(out.split(b"\r\n\r\n", 1)[1])
            if want == 200:
                assert body["choices"][0]["text"], body
            else:
                assert body["error"]["code"] == "bad_answer", body


# -- 10: one answer per request, the head's rules (RFC 9112) ----------------------------


def answers(base: str, raw: bytes, timeout_s: float = 3.0) -> list[bytes]:
    """Every status line the gateway wrote for `raw` before it closed or went quiet."""
    with connect(base) as s:
        s.sendall(raw)
        _, out = closed_by_peer(s, timeout_s)
    return re.findall(rb"HTTP/1\.[01] \d{3}", out)


def test_10_an_upgrade_is_refused_once_and_never_forwarded(
    keyed: str, stack: tuple[str, int, Path, str]
) -> None:
    """`Upgrade: h2c` on /health got 200 then an unrequested 400; an authenticated
    /v1/models with `Upgrade: websocket` was forwarded, answered 200, then 400."""
    base = stack[0]
    h2c = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
    assert answers(base, h2c) == [b"HTTP/1.1 400"]
    ws = (f"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\n"
          "connection: upgrade\r\nupgrade: websocket\r\n\r\n").encode()  # fmt: skip
    assert answers(keyed, ws) == [b"HTTP/1.1 400"]


def test_10_host_must_be_there_once_and_authorization_once(
    keyed: str, stack: tuple[str, int, Path, str]
) -> None:
    base = stack[0]
    assert answers(base, b"GET /health HTTP/1.1\r\n\r\n") == [b"HTTP/1.1 400"]
    two = b"GET /health HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n"
    assert answers(base, two) == [b"HTTP/1.1 400"]
    assert answers(base, b"GET /health HTTP/1.0\r\n\r\n") == [b"HTTP/1.1 200"]  # 1.0: no Host
    auth = (f"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\n"
            "authorization: Bearer other\r\n\r\n").encode()  # fmt: skip
    assert answers(keyed, auth) == [b"HTTP/1.1 400"]


def test_10_connect_is_refused_without_the_parsers_internal_text(
    stack: tuple[str, int, Path, str],
) -> None:
    with connect(stack[0]) as s:
        s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n")
        _, out = closed_by_peer(s, 3.0)
    assert status_of(out) in (400, 405), out
    assert b"callback" not in out.lower() and b"httptools" not in out.lower(), out


# -- 11: what /metrics and answers tell about the fleet ----------------------------------


def get(base: str, path: str, headers: str = "") -> bytes:
    """One GET on a raw socket: the whole answer, head and body."""
    with connect(base) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n".encode())
        return read_until(s, lambda b: False, 5.0)


def test_11_metrics_need_the_metrics_key(keyed_gateway: tuple[str, str, str]) -> None:
    """`metrics.api_key`: 401 in OpenAI's shape without it, or with a client's API key."""
    _, at, _ = keyed_gateway
    for headers in ("", f"authorization: Bearer {KEY}\r\n", "authorization: Basic eDp5\r\n"):
        out = get(at, "/metrics", headers)
        assert status_of(out) == 401, out[:300]
        assert error_of(out) == {
            "message": error_of(out)["message"],
            "param": None,
            "type": "authentication_error",
            "code": "invalid_api_key",
        }
        assert b"www-authenticate: Bearer" in out and b"burstguard_" not in out
    out = get(at, "/metrics", f"authorization: Bearer {METRICS_KEY}\r\n")
    assert status_of(out) == 200 and b"burstguard_ready_backends 1.0" in out


def test_11_the_metrics_listener_serves_them_and_the_client_port_does_not(
    keyed_gateway: tuple[str, str, str],
) -> None:
    """`metrics.listen`: /metrics (and the probes' routes) there, nothing else; the
    client's listener answers /metrics 404, even with the metrics key."""
    base, at, _ = keyed_gateway
    with_key = f"authorization: Bearer {METRICS_KEY}\r\n"
    assert status_of(get(base, "/metrics", with_key)) == 404
    assert status_of(get(base, "/health")) == status_of(get(at, "/health")) == 200
    assert status_of(get(at, "/ready")) == 200
    for path in ("/v1/models", "/openapi.json"):
        assert status_of(get(at, path, f"authorization: Bearer {KEY}\r\n")) == 404
    assert status_of(get(at, "/metrics", with_key)) == 200


def test_11_no_backend_address_in_metrics_or_answers(
    stack: tuple[str, int, Path, str], keyed_gateway: tuple[str, str, str]
) -> None:
    """Unauthenticated /metrics labels backends by name; no answer a client can get names
    the backend's address (plain and streamed completions, models, probes, errors)."""
    base, _, log, emu = stack
    where = emu.removeprefix("http://").encode()  # 127.0.0.1:PORT
    port = b":" + where.rsplit(b":", 1)[1]
    answers = [_exchange(base, completion(4)), _exchange(base, completion(4, stream=True))]
    answers += [get(base, p) for p in ("/v1/models", "/ready", "/health", "/openapi.json")]
    answers.append(_exchange(base, completion(4, model="no-such-model")))  # the backend's 4xx
    keyed_base = keyed_gateway[0]
    answers.append(get(keyed_base, "/v1/models", f"authorization: Bearer {KEY}\r\n"))
    for out in answers:
        assert status_of(out) < 500, out[:300]
        assert where not in out and port not in out and b"http://" not in out, out[:300]
    body = get(base, "/metrics")
    assert status_of(body) == 200
    assert b'burstguard_backend_routed_total{backend="backend-0"}' in body
    assert where not in body and port not in body and b"http://" not in body
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"id"')]
    assert lines and all(x["backends"] in ([], ["backend-0"]) for x in lines)


# -- 12: bench against a gateway that asks for keys ----------------------------------------


def test_12_bench_sends_the_api_key_and_scrapes_with_the_metrics_key(
    keyed_gateway: tuple[str, str, str], tmp_path: Path
) -> None:
    """`bench --api-key` (or BURSTGUARD_API_KEY) on every request, `--metrics-key` on the
    scrape; without a key, one clear line and exit 1 before any load; neither key is
    written to the run."""
    base, at, _ = keyed_gateway
    load = ["bench", "--target", base, "--pattern", "poisson", "--rate", "8", "--duration",
            "2", "--prompt-tokens", "16", "--output-tokens", "4", "--quiet"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURSTGUARD_")}
    refused = subprocess.run([*BURSTGUARD, *load, "--out", str(tmp_path / "no-key")],
                             capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "asks for an API key" in refused.stderr and "--api-key" in refused.stderr
    assert not (tmp_path / "no-key" / "records.jsonl").exists()
    run = tmp_path / "keyed"
    done = subprocess.run(
        [*BURSTGUARD, *load, "--out", str(run), "--metrics-url", f"{at}/metrics",
         "--metrics-key", METRICS_KEY],
        capture_output=True, text=True, timeout=120, env={**env, "BURSTGUARD_API_KEY": KEY},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["requests"] > 0 and summary["errors"] == 0, summary["outcomes"]
    assert summary["scrape_errors"] == 0
    samples = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert samples and any(len(s) > 1 for s in samples)  # series besides `t`
    for f in run.iterdir():
        text = f.read_text(errors="replace")
        assert KEY not in text and METRICS_KEY not in text, f
