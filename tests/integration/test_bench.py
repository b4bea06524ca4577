"""`burstguard bench` against real servers: the emulator, and a target that sends 429s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from tests.conftest import BURSTGUARD, start_emulator

from burstguard.procs import free_port
from burstguard.wire.records import read_records
from burstguard.wire.summary import STAT_KEYS, read_summary

SHORT = ["--prompt-tokens", "64", "--output-tokens", "8"]


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CI": "true"}
    return subprocess.run(
        [*BURSTGUARD, "bench", "--quiet", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


@pytest.fixture
def instant(tmp_path: Path) -> Iterator[str]:
    """An emulator that answers (almost) instantly: the client is what is measured."""
    with start_emulator(tmp_path, profile="instant", speedup=1.0) as proc:
        yield proc.base_url  # type: ignore[attr-defined]


def test_open_loop_records_and_summary_schema(instant: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = bench(
        "--target", instant, "--pattern", "poisson", "--rate", "40", "--duration", "3",
        "--prompt-tokens", "100", "--output-tokens", "12", "--classes", "interactive=0.5,batch=0.5",
        "--out", str(out), "--scrape-metrics",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = read_summary(out / "summary.json")
    records = list(read_records(out / "records.jsonl"))
    assert summary["requests"] == len(records) > 60
    assert summary["completed"] == summary["requests"] and summary["errors"] == 0
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "schedule_lag_s"):
        assert set(STAT_KEYS) <= set(summary[key])
    for key in ("slo_attainment", "output_tokens_per_s", "offered_rate_rps", "achieved_rate_rps"):
        assert summary[key] is not None
    assert set(summary["by_class"]) == {"interactive", "batch"}
    # the bench synthesised prompts the server counts as the requested length
    assert {r.prompt_tokens for r in records} == {100}
    assert {r.completion_tokens for r in records} == {12}
    assert all(len(r.itl_s) == 11 for r in records)
    assert all(0 < r.ttft_s <= r.e2e_s for r in records)  # type: ignore[operator]
    assert summary["server_series"]["t"] and "vllm:num_requests_running" in summary["server_series"]
    assert summary["offered_rate_rps"] == pytest.approx(40, rel=0.35)


def test_schedule_has_no_drift_at_a_high_rate(instant: str, tmp_path: Path) -> None:
    """500 req/s of short requests: sends stay on their absolute schedule (benchmark
    benchmarks/bench_loadgen.py reports the figure; here a loose bound that still catches
    accumulated lateness)."""
    out = tmp_path / "fast"
    res = bench(
        "--target", instant, "--pattern", "constant", "--rate", "500", "--duration", "4",
        "--prompt-tokens", "16", "--output-tokens", "2", "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = read_summary(out / "summary.json")
    assert summary["requests"] == 2000 and summary["errors"] == 0
    lag = summary["schedule_lag_s"]
    p50, p99 = lag["p50"] * 1e3, lag["p99"] * 1e3
    print(f"schedule lag at 500 req/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    # loose: CI shares 2 cores with the emulator; the strict p99 < 5 ms is the benchmark's
    assert lag["p50"] < 0.02 and lag["p99"] < 0.25
    records = sorted(read_records(out / "records.jsonl"), key=lambda r: r.scheduled_s)
    tail = [r.sent_s - r.scheduled_s for r in records[-200:]]  # type: ignore[operator]
    assert sorted(tail)[100] < 0.03  # no accumulated drift at the end of the run


def test_workers_share_one_schedule_split_by_request(instant: str, tmp_path: Path) -> None:
    """--workers 2: every request of the one schedule is sent exactly once, at its time,
    and the merged records read as one run; a closed loop splits its users the same way."""
    out = tmp_path / "two"
    res = bench(
        "--target", instant, "--pattern", "poisson", "--rate", "150", "--duration", "3",
        *SHORT, "--workers", "2", "--out", str(out), "--scrape-metrics",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = read_summary(out / "summary.json")
    records = list(read_records(out / "records.jsonl"))
    n = summary["requests"]
    assert n == len(records) > 300 and summary["completed"] == n and summary["workers"] == 2
    assert sorted(int(r.id[1:]) for r in records) == list(range(n))  # once each
    assert [r.scheduled_s for r in records] == sorted(r.scheduled_s for r in records)
    assert summary["schedule_lag_s"]["p50"] < 0.02  # one origin for both processes
    assert summary["server_series"]["t"] and not list(out.glob("records.w*.jsonl"))

    closed = tmp_path / "closed"
    res = bench(
        "--target", instant, "--concurrency", "4", "--duration", "2", *SHORT,
        "--workers", "2", "--out", str(closed),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    ids = [r.id for r in read_records(closed / "records.jsonl")]
    assert len(ids) == len(set(ids)) > 20
    assert {int(i[1:]) % 2 for i in ids} == {0, 1}  # both workers sent


@pytest.mark.parametrize("workers", ["1", "2"])
def test_start_at_puts_the_schedule_zero_at_a_shared_instant(
    instant: str, tmp_path: Path, workers: str
) -> None:
    """--start-at T: nothing is sent before the Unix time T, then the schedule runs on time
    from T (what `burstguard fleet --start-at T` shares); a time already past is refused."""
    past = bench(
        "--target", instant, "--pattern", "poisson", "--rate", "10", "--duration", "1",
        "--start-at", str(time.time() - 1), "--out", str(tmp_path / "past"),
    )  # fmt: skip
    assert past.returncode == 2 and "has passed" in past.stdout + past.stderr
    start_at = time.time() + 5.0
    out = tmp_path / "later"
    res = bench(
        "--target", instant, "--pattern", "poisson", "--rate", "20", "--duration", "1", *SHORT,
        "--workers", workers, "--start-at", str(start_at), "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert time.time() >= start_at + 0.5  # it waited for T, then sent the 1 s schedule
    summary = read_summary(out / "summary.json")
    assert summary["completed"] == summary["requests"] > 5
    assert summary["schedule_lag_s"]["p50"] < 0.05  # on time from T, not late by the wait


def test_burst_inflates_p95_ttft_and_compare_gates_it(tmp_path: Path) -> None:
    """The seed's finding on the emulator: same mean rate, bursts >= 3x steady P95 TTFT;
    compare exits 1 on steady-vs-burst and 0 on steady-vs-steady."""
    with start_emulator(tmp_path, speedup=2.0) as proc:
        target = proc.base_url  # type: ignore[attr-defined]
        shape = ["--prompt-tokens", "1024", "--output-tokens", "256", "--speedup", "2"]
        out = tmp_path / "scenario"
        res = bench(
            "--target", target, "--scenario", "steady-vs-burst", "--duration", "30",
            *shape, "--out", str(out), "--scrape-metrics", "--report", str(tmp_path / "r.html"),
            timeout=150,
        )  # fmt: skip
        assert res.returncode == 1, res.stdout + res.stderr
        steady = read_summary(out / "steady" / "summary.json")
        burst = read_summary(out / "burst" / "summary.json")
        assert steady["mode"] == "closed" and steady["concurrency"] == 32
        ratio = burst["ttft_s"]["p95"] / steady["ttft_s"]["p95"]
        print(f"P95 TTFT steady {steady['ttft_s']['p95']:.3f} s, burst "
              f"{burst['ttft_s']['p95']:.3f} s: {ratio:.1f}x")  # fmt: skip
        assert ratio >= 3.0
        rate_ratio = burst["offered_rate_rps"] / steady["offered_rate_rps"]
        assert 0.7 < rate_ratio < 1.4  # the burst leg ran at the steady leg's rate
        assert json.loads((out / "verdict.json").read_text())["passed"] is False
        assert (tmp_path / "r.html").stat().st_size > 10_000
        again = tmp_path / "steady2"
        res = bench(
            "--target", target, "--concurrency", "32", "--duration", "30", *shape,
            "--out", str(again), timeout=90,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    gate = subprocess.run(
        [*BURSTGUARD, "compare", str(out / "steady"), str(again)], capture_output=True, text=True
    )
    assert gate.returncode == 0, gate.stdout
    gate = subprocess.run(
        [*BURSTGUARD, "compare", str(out / "steady"), str(out / "burst")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert gate.returncode == 1


def test_retry_storm_immediate_multiplies_load_and_backoff_damps_it(tmp_path: Path) -> None:
    """An overloaded engine (4 sequences at a time, long outputs) and a 0.3 s timeout:
    immediate retries multiply what the server is offered; exponential backoff with full
    jitter and a retry budget keeps it near the original load."""
    with start_emulator(
        tmp_path, "--max-num-seqs", "4", profile="llama3-8b-a100", speedup=1.0
    ) as proc:
        target = proc.base_url  # type: ignore[attr-defined]
        load = [
            "--target", target, "--pattern", "burst", "--rate", "20", "--duration", "4",
            "--burst-size", "20-20", "--prompt-tokens", "256", "--output-tokens", "400",
            "--timeout", "0.3", "--max-retries", "3",
        ]  # fmt: skip
        storm, damped = tmp_path / "storm", tmp_path / "damped"
        assert bench(*load, "--retry", "immediate", "--out", str(storm)).returncode == 0
        res = bench(*load, "--retry", "exponential", "--retry-budget", "0.2",
                    "--retry-base", "0.5", "--out", str(damped))  # fmt: skip
        assert res.returncode == 0, res.stderr
    s, d = read_summary(storm / "summary.json"), read_summary(damped / "summary.json")
    assert s["requests"] == d["requests"]
    print(f"attempts per request: immediate {s['attempts'] / s['requests']:.2f}, "
          f"exponential+budget {d['attempts'] / d['requests']:.2f}")  # fmt: skip
    assert s["retries"] >= 2 * s["requests"]
    assert s["attempts"] >= 3 * s["requests"]
    assert d["attempts"] <= 1.2 * d["requests"] + 10
    assert s["outcomes"].get("timeout", 0) > 0


class _TooBusyOnce(BaseHTTPRequestHandler):
    """A target that answers every request's first try with 429 + Retry-After: 1 and the
    retry with a normal one-token stream (an OpenAI-compatible server under admission)."""

    seen: ClassVar[dict[str, float]] = {}
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = payload["messages"][0]["content"][:16]
        with self.lock:
            first = key not in self.seen
            self.seen.setdefault(key, time.monotonic())
        if first:
            body = b'{"error":{"message":"busy","type":"rate_limit","code":429}}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "length"}]}
        usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in (chunk, usage):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def test_retry_after_from_a_429_is_honoured(tmp_path: Path) -> None:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _TooBusyOnce)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "ra"
        res = bench(
            "--target", f"http://127.0.0.1:{port}", "--pattern", "constant", "--rate", "5",
            "--duration", "1", *SHORT, "--retry", "exponential", "--retry-base", "0.01",
            "--retry-cap", "0.02", "--out", str(out),
        )  # fmt: skip
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stderr
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 5 and all(r.ok for r in records)
    for r in records:
        assert r.retries == 1 and r.retry_after_s == 1.0
        (failed,) = r.attempts
        assert failed["status"] == 429 and failed["delay_s"] >= 1.0
        assert r.ttft_s is not None and r.ttft_s >= 1.0  # the user waited as told


def test_sigint_keeps_every_record_and_writes_the_summary(emulator: str, tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen(
        [*BURSTGUARD, "bench", "--target", emulator, "--pattern", "poisson", "--rate", "20",
         "--duration", "120", "--speedup", "20", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    lines = (out / "records.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["schema"] == "burstguard.record/1" for line in lines)
    summary = read_summary(out / "summary.json")
    assert summary["interrupted"] is True
    assert summary["requests"] == len(lines) and summary["completed"] > 0


def test_sigint_with_workers_drains_and_merges(emulator: str, tmp_path: Path) -> None:
    """Ctrl-C reaches the parent and every worker; each drains once, records merge."""
    out = tmp_path / "interrupted"
    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen(
        [*BURSTGUARD, "bench", "--target", emulator, "--pattern", "poisson", "--rate", "20",
         "--duration", "120", "--speedup", "20", "--workers", "2", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60  # workers spawn slowly on a busy machine
    while not any(p.stat().st_size for p in out.glob("records.w*.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = read_summary(out / "summary.json")
    lines = (out / "records.jsonl").read_text().splitlines()
    assert summary["interrupted"] is True and summary["requests"] == len(lines) > 0
    assert summary["completed"] > 0 and not list(out.glob("records.w*.jsonl"))


def _serve_not_openai(port: int) -> ThreadingHTTPServer:
    class NotOpenAI(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), NotOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_bad_targets_fail_fast_with_one_line(emulator: str, tmp_path: Path) -> None:
    closed = free_port()
    web_port = free_port()
    web = _serve_not_openai(web_port)
    cases = {
        f"http://127.0.0.1:{closed}": "cannot reach",
        f"http://127.0.0.1:{web_port}": "does not look like an OpenAI-compatible server",
    }
    try:
        for target, message in cases.items():
            start = time.monotonic()
            res = bench("--target", target, "--concurrency", "2", "--out", str(tmp_path / "x"))
            assert res.returncode == 2 and message in res.stderr, res.stderr
            assert "Traceback" not in res.stderr and time.monotonic() - start < 10
    finally:
        web.shutdown()
    res = bench("--target", emulator, "--model", "nope", "--concurrency", "2",
                "--out", str(tmp_path / "y"))  # fmt: skip
    assert res.returncode == 2 and "'nope' is not served" in res.stderr
    for args, message in (
        (["--retry", "sometimes", "--concurrency", "2"], "--retry"),
        (["--slo", "ttft=fast", "--concurrency", "2"], "SLO"),
        (["--rate", "3"], "exactly one of"),
    ):
        res = bench("--target", emulator, *args, "--out", str(tmp_path / "z"))
        assert res.returncode == 2 and message in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
