"""The chaos run: bursts through 2 gateway replicas sharing a real Redis in front of 3
emulators, while a seeded fault plan SIGKILLs and restarts engines, SIGSTOPs and resumes
them, restarts a gateway (SIGTERM drain, then up again on its port) and kills and restarts
Redis; then checks, from the clients' records, the gateways' logs and metrics, the engines'
metrics and Redis, that nothing was lost, doubled, miscounted or held past the deadlines.

One module for `benchmarks/chaos.py` (minutes, printed) and the slow test
`tests/integration/test_chaos.py` (a short plan, asserted): docs/gateway.md, "Chaos run".

Clients: half use burstguard's retry client (`call_with_retries` over aiohttp, completions,
each try on the other gateway, as a client behind a load balancer lands), half the official
`openai` SDK (chat, `max_retries=0`: each call one try). Every try is one record with one
outcome: `completed`, `http_<status>` (with its error code), `stream_error` (an in-band
error event, with its code), `refused` (its gateway was down: the client's own outcome),
or a bad one: `broken` (a reset, an EOF without an answer, a truncated stream, text lost
or doubled) or `timeout`. Output lengths are exact: every request says `ignore_eos` and
the emulator then generates exactly `max_tokens`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import os
import random
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai

from burstguard.client.retry import (
    RetryableFailure,
    RetryPolicy,
    call_with_retries,
    retry_after_from_headers,
)
from burstguard.procs import ManagedProcess
from burstguard.redis_server import RedisServer
from burstguard.scrape import metric_sum, parse_metrics
from tests.conftest import start_emulator, start_fleet_gateway

MODEL = "llama3-8b-h100"
N_ENGINES, N_GATEWAYS = 3, 2

# the error codes each fault may give a client (docs/gateway.md: "Failover and the retry
# budget", "Hung backends", "Shutdown"); Redis loss must give none (local caps)
ENGINE_CODES = frozenset({"backend_unreachable", "backend_error", "backend_cut_stream",
                          "backend_timeout", "backend_stalled", "no_backend"})  # fmt: skip
FAULT_CODES: dict[str, frozenset[str]] = {
    "engine_kill": ENGINE_CODES,
    "engine_stop": ENGINE_CODES,
    "gateway_restart": frozenset({"shutdown"}),
    "redis_kill": frozenset(),
}
BAD = ("broken", "timeout")


@dataclass(frozen=True)
class ChaosConfig:
    duration_s: float = 180.0
    seed: int = 1
    speedup: float = 2.0  # the emulators' (the gateways are not told: deadlines are wall s)
    first_token_floor_s: float = 2.0
    stall_s: float = 2.0
    drain_s: float = 3.0
    first_token_factor: float = 4.0
    decode_tokens_per_s: float = 100.0  # a non-streamed answer's deadline: max_tokens at this
    margin_s: float = 1.0  # the bound on a hung wait: max(floor, stall) + this
    burst_every_s: tuple[float, float] = (3.0, 6.0)
    burst_size: tuple[int, int] = (10, 30)
    background_rps: float = 2.0
    max_tokens: tuple[int, ...] = (32, 128, 256, 512)  # streams of ~0.2-3 s: faults hit some
    client_timeout_s: float = 60.0
    deadlines: bool = True  # off: only read_timeout_s bounds a hang (to see a check fail)

    @property
    def hung_bound_s(self) -> float:
        return max(self.first_token_floor_s, self.stall_s) + self.margin_s


@dataclass(frozen=True)
class Fault:
    """One fault: at `at_s` after the load starts, `kind` on `target` (an engine or gateway
    index; 0 for Redis), which stays down (stopped) `hold_s` before it is brought back."""

    at_s: float
    kind: str
    target: int
    hold_s: float

    def describe(self) -> str:
        what = {"engine_kill": f"SIGKILL engine {self.target}, restart after",
                "engine_stop": f"SIGSTOP engine {self.target}, SIGCONT after",
                "gateway_restart": f"SIGTERM gateway {self.target} (drain), start again after",
                "redis_kill": "SIGKILL redis, restart (empty) after"}[self.kind]  # fmt: skip
        return f"t={self.at_s:6.1f} s  {what} {self.hold_s:.1f} s"


def fault_plan(duration_s: float, seed: int) -> list[Fault]:
    """A seeded plan over the middle of the run (the last 20 % stays quiet, so every fault
    is over before the load ends): one engine fault per ~15 s (kills and stops), a gateway
    restart and a Redis kill per ~60 s (at least one each). Faults overlap, but at most two
    engines are down at once and one gateway."""
    rng = random.Random(seed)
    lo, hi = 0.1 * duration_s, 0.8 * duration_s
    n_engine = max(2, round(duration_s / 15))
    n_gateway = n_redis = max(1, round(duration_s / 60))
    kinds = ["engine_kill", "engine_stop"] * math.ceil(n_engine / 2)
    wanted = kinds[:n_engine] + ["gateway_restart"] * n_gateway + ["redis_kill"] * n_redis
    busy: dict[tuple[str, int], list[tuple[float, float]]] = {}
    plan: list[Fault] = []
    for kind in wanted:
        for _ in range(1000):
            at = round(rng.uniform(lo, hi), 1)
            hold = round(rng.uniform(*{"engine_kill": (1.0, 4.0), "engine_stop": (3.0, 6.0),
                                       "gateway_restart": (0.0, 1.0),
                                       "redis_kill": (2.0, 5.0)}[kind]), 1)  # fmt: skip
            span = (at - 2.0, at + hold + 8.0)  # + the restart / drain and recovery
            group = "engine" if kind.startswith("engine") else kind
            n = {"engine": N_ENGINES, "gateway_restart": N_GATEWAYS}.get(group, 1)
            target = rng.randrange(n)
            overlaps = [(g, t) for (g, t), spans in busy.items() if g == group
                        and any(a < span[1] and span[0] < b for a, b in spans)]  # fmt: skip
            if (group, target) in overlaps or (group == "engine" and len(overlaps) >= 2):
                continue
            if group != "engine" and overlaps:
                continue
            busy.setdefault((group, target), []).append(span)
            plan.append(Fault(at, kind, target, hold))
            break
    return sorted(plan, key=lambda f: f.at_s)


@dataclass
class Done:
    """A fault as it happened: when it started and when its target answered again."""

    fault: Fault
    start: float
    back: float = math.inf


@dataclass
class Try:
    """One HTTP try of a client: one record, one final outcome."""

    n: int
    client: str  # "retry" (burstguard's retry client) or "sdk" (openai)
    gateway: int
    stream: bool
    max_tokens: int
    sent: float
    outcome: str | None = None
    status: int = 0
    code: str | None = None
    rid: str | None = None
    tokens: int = 0
    retry_after_s: float | None = None
    progress: list[float] = field(default_factory=list)  # each token's arrival (the end too)
    detail: str = ""
    ends: int = 0  # how many final outcomes it was given (must be 1)

    def end(self, outcome: str, detail: str = "") -> None:
        self.ends += 1
        if self.outcome is None:
            self.outcome, self.detail = outcome, detail[:200]
            self.progress.append(time.monotonic())


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connect call failed" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Clients:
    """Sends the load and keeps every try's record."""

    def __init__(self, cfg: ChaosConfig, gateways: list[str]) -> None:
        self.cfg, self.gateways = cfg, gateways
        self.tries: list[Try] = []
        self.calls: Counter[str] = Counter()  # a retry client's call: its last try's outcome
        self.policy = RetryPolicy(max_retries=3, base_s=0.25, cap_s=2.0, max_retry_after_s=5.0)
        self.session: aiohttp.ClientSession | None = None
        self.sdks: list[openai.AsyncOpenAI] = []

    async def __aenter__(self) -> Clients:
        timeout = aiohttp.ClientTimeout(total=self.cfg.client_timeout_s)
        self.session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
        )
        self.sdks = [openai.AsyncOpenAI(base_url=g + "/v1", api_key="unused", max_retries=0,
                                        timeout=self.cfg.client_timeout_s)
                     for g in self.gateways]  # fmt: skip
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()
        for sdk in self.sdks:
            await sdk.close()

    def _try(self, client: str, gateway: int, stream: bool, max_tokens: int) -> Try:
        t = Try(len(self.tries), client, gateway, stream, max_tokens, time.monotonic())
        t.progress.append(t.sent)
        self.tries.append(t)
        return t

    async def retry_call(self, first: int, stream: bool, max_tokens: int, prompt: str) -> None:
        """burstguard's retry client over aiohttp: each try on the next gateway."""
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                "stream": stream}  # fmt: skip
        mine: list[Try] = []

        async def send(headers: dict[str, str]) -> None:
            g = (first + len(mine)) % len(self.gateways)
            t = self._try("retry", g, stream, max_tokens)
            mine.append(t)
            await self._aiohttp(t, self.gateways[g], body, headers)
            if t.outcome == "refused":
                raise RetryableFailure(error="connection_refused")
            if t.outcome == "stream_error":
                raise RetryableFailure(error="stream_broken")
            if t.outcome != "completed":
                raise RetryableFailure(status=t.status or None, retry_after_s=t.retry_after_s,
                                       error=None if t.status else t.outcome)  # fmt: skip

        try:
            await call_with_retries(send, self.policy)
            self.calls[mine[-1].outcome or "?"] += 1
        except RetryableFailure as failure:
            self.calls[f"gave up: {failure}"] += 1

    async def _aiohttp(
        self, t: Try, base: str, body: dict[str, Any], headers: dict[str, str]
    ) -> None:
        assert self.session is not None
        try:
            async with self.session.post(base + "/v1/completions", json=body,
                                         headers=headers) as resp:  # fmt: skip
                t.status, t.rid = resp.status, resp.headers.get("x-request-id")
                if resp.status != 200:
                    err = (await resp.json()).get("error", {})
                    t.code = err.get("code")
                    t.retry_after_s = retry_after_from_headers(resp.headers)
                    return t.end(f"http_{resp.status}")
                if not t.stream:
                    usage = (await resp.json())["usage"]
                    t.tokens = usage["completion_tokens"]
                    return t.end(*self._whole(t))
                done = False
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    event = json.loads(data)
                    if "error" in event:
                        t.code = event["error"].get("code")
                        continue
                    if any(c.get("text") for c in event.get("choices", ())):
                        t.tokens += 1
                        t.progress.append(time.monotonic())
                if t.code is not None:
                    return t.end(
                        "stream_error" if not done else "broken", "error event, then [DONE]"
                    )
                if not done:
                    return t.end("broken", "stream ended without [DONE] or an error event")
                t.end(*self._whole(t))
        except TimeoutError:
            t.end("timeout")
        except (aiohttp.ClientError, ValueError, KeyError) as exc:
            t.end("refused" if _refused(exc) else "broken", f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _whole(t: Try) -> tuple[str, str]:
        if t.tokens == t.max_tokens:
            return ("completed", "")
        return ("broken", f"{t.tokens} tokens of {t.max_tokens}: text lost or doubled")

    async def sdk_call(self, g: int, stream: bool, max_tokens: int, prompt: str) -> None:
        """The official openai SDK (chat), one try per call."""
        t = self._try("sdk", g, stream, max_tokens)
        sdk = self.sdks[g]
        messages = [{"role": "user", "content": prompt}]
        try:
            raw = await sdk.chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, max_tokens=max_tokens, stream=stream,  # type: ignore[arg-type]
                extra_body={"ignore_eos": True},
            )  # fmt: skip
            t.status, t.rid = raw.http_response.status_code, raw.headers.get("x-request-id")
            parsed: Any = raw.parse()
            if inspect.isawaitable(parsed):  # the SDK's async parse, in the versions with one
                parsed = await parsed
            if not stream:
                t.tokens = parsed.usage.completion_tokens
            else:
                try:
                    async for chunk in parsed:
                        if chunk.choices and chunk.choices[0].delta.content:
                            t.tokens += 1
                            t.progress.append(time.monotonic())
                except openai.APIError as exc:  # an in-band error event
                    if isinstance(exc, openai.APIConnectionError) or exc.code is None:
                        raise
                    t.code = exc.code
                    return t.end("stream_error")
            t.end(*self._whole(t))
        except openai.APIStatusError as exc:
            t.status, t.rid = exc.status_code, exc.response.headers.get("x-request-id")
            t.code = exc.code
            t.end(f"http_{exc.status_code}")
        except openai.APITimeoutError:
            t.end("timeout")
        except Exception as exc:  # every other failure: a broken answer
            t.end("refused" if _refused(exc) else "broken", f"{type(exc).__name__}: {exc}")

    async def run(self, until: float, rng: random.Random) -> None:
        """Bursts every few seconds plus a Poisson background, until `until`; then waits for
        every call to end."""
        cfg = self.cfg
        pending: set[asyncio.Task[None]] = set()

        def launch() -> None:
            stream = rng.random() < 0.6
            max_tokens = rng.choice(cfg.max_tokens)
            prompt = "chaos " * rng.randint(10, 200)
            g = rng.randrange(len(self.gateways))
            coro = (self.retry_call(g, stream, max_tokens, prompt) if rng.random() < 0.5
                    else self.sdk_call(g, stream, max_tokens, prompt))  # fmt: skip
            task = asyncio.ensure_future(coro)
            pending.add(task)
            task.add_done_callback(pending.discard)

        next_burst = time.monotonic() + rng.uniform(*cfg.burst_every_s) / 2
        while (now := time.monotonic()) < until:
            if now >= next_burst:
                for _ in range(rng.randint(*cfg.burst_size)):
                    launch()
                next_burst = now + rng.uniform(*cfg.burst_every_s)
            launch()
            await asyncio.sleep(min(rng.expovariate(cfg.background_rps), max(0.0, until - now)))
        if pending:  # what is still open then has no outcome: the check says so
            await asyncio.wait(pending, timeout=cfg.client_timeout_s * 4 + 30)
        for task in list(pending):
            task.cancel()


class Fleet:
    """Redis, the engines and the gateways, and the faults done to them."""

    def __init__(self, cfg: ChaosConfig, workdir: Path) -> None:
        self.cfg, self.workdir = cfg, workdir
        self.redis = RedisServer(workdir)
        self.engines: list[ManagedProcess] = []
        self.gateways: list[ManagedProcess] = []
        self.ports: list[int] = []
        self.incarnations: list[list[Path]] = []  # per gateway: its processes' folders
        self.pre_stop_scrapes: list[dict[str, float]] = []  # a drained gateway's last counters
        self.stopped_pids: set[int] = set()

    def engine_urls(self) -> list[str]:
        return [e.base_url for e in self.engines]  # type: ignore[attr-defined]

    def gateway_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def gateway_config(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "drain_s": cfg.drain_s,
            "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 20.0}],
            "admission": {"max_in_flight_per_backend": 12},
            "backends": [{"url": u, "resume": True} for u in self.engine_urls()],
            "backend_deadlines": {"enabled": cfg.deadlines,
                                  "first_token_floor_s": cfg.first_token_floor_s,
                                  "first_token_factor": cfg.first_token_factor,
                                  "decode_tokens_per_s": cfg.decode_tokens_per_s,
                                  "stall_s": cfg.stall_s},
            "fleet": {"redis": {"url": self.redis.url, "replicas": N_GATEWAYS,
                                "lease_ttl_s": 3.0, "sync_interval_s": 0.5,
                                "rejoin_interval_s": 0.5}},
        }  # fmt: skip

    def _folder(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _engine(self, i: int, port: int | None = None, n: int = 0) -> ManagedProcess:
        proc = start_emulator(self._folder(f"engine{i}.{n}"), speedup=self.cfg.speedup, port=port)
        return proc.start()

    def _gateway(self, i: int, port: int | None = None) -> ManagedProcess:
        folder = self._folder(f"gateway{i}.{len(self.incarnations[i])}")
        self.incarnations[i].append(folder)
        proc = start_fleet_gateway(folder, [], self.gateway_config(), port=port)
        return proc.start()

    def start(self) -> None:
        self.redis.start()
        self.engines = [self._engine(i) for i in range(N_ENGINES)]
        self.ports = []
        for i in range(N_GATEWAYS):
            self.incarnations.append([])
            self.gateways.append(self._gateway(i))
            self.ports.append(int(self.gateways[i].base_url.rsplit(":", 1)[1]))  # type: ignore[attr-defined]

    def stop(self) -> None:
        for pid in list(self.stopped_pids):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
        for p in [*self.gateways, *self.engines]:
            p.stop()
        self.redis.kill()

    async def inject(self, fault: Fault, t0: float, log: list[Done]) -> None:
        """Waits for the fault's time, does it, waits `hold_s`, undoes it."""
        await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
        done = Done(fault, time.monotonic())
        log.append(done)
        i = fault.target
        if fault.kind in ("engine_kill", "engine_stop"):
            pid = self.engines[i].proc.pid  # type: ignore[union-attr]
            if fault.kind == "engine_stop":
                os.killpg(pid, signal.SIGSTOP)
                self.stopped_pids.add(pid)
                await asyncio.sleep(fault.hold_s)
                os.killpg(pid, signal.SIGCONT)
                self.stopped_pids.discard(pid)
            else:
                os.killpg(pid, signal.SIGKILL)
                self.engines[i].proc.wait()  # type: ignore[union-attr]
                await asyncio.sleep(fault.hold_s)
                port = int(self.engine_urls()[i].rsplit(":", 1)[1])
                n = sum(1 for f in log if f.fault.kind == "engine_kill" and f.fault.target == i)
                self.engines[i] = await asyncio.to_thread(self._engine, i, port, n)
        elif fault.kind == "gateway_restart":
            self.pre_stop_scrapes.append(await asyncio.to_thread(scrape, self.gateway_urls()[i]))
            proc = self.gateways[i].proc
            assert proc is not None
            os.killpg(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, self.cfg.drain_s + 30)
            await asyncio.sleep(fault.hold_s)
            self.gateways[i] = await asyncio.to_thread(self._gateway, i, self.ports[i])
        else:
            self.redis.kill()
            await asyncio.sleep(fault.hold_s)
            await asyncio.to_thread(self.redis.start)
        done.back = time.monotonic()


def scrape(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        return parse_metrics(resp.read().decode())


def by_label(samples: dict[str, float], name: str, label: str) -> Counter[str]:
    """`name`'s samples summed by one label's value."""
    out: Counter[str] = Counter()
    for key, value in samples.items():
        if key.startswith(name + "{"):
            labels = dict(x.split("=", 1) for x in key[len(name) + 1 : -1].split(","))
            out[labels.get(label, "").strip('"')] += int(value)
    return out


def log_lines(folder: Path) -> list[dict[str, Any]]:
    text = next(folder.glob("gateway-*.log")).read_text()
    return [json.loads(x) for x in text.splitlines() if x.startswith('{"id"')]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    cfg: ChaosConfig
    plan: list[Fault]
    done: list[Done]
    tries: list[Try]
    calls: Counter[str]
    checks: list[Check]
    figures: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def text(self) -> str:
        out = [f"chaos run: seed {self.cfg.seed}, {self.cfg.duration_s:.0f} s of load",
               "fault plan:", *(f"  {f.describe()}" for f in self.plan),
               "faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(
                   Counter(d.fault.kind for d in self.done).items())),
               f"figures: {json.dumps(self.figures, sort_keys=True)}",
               f"retry-client calls: {dict(sorted(self.calls.items()))}"]  # fmt: skip
        out += [f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}" for c in self.checks]
        return "\n".join(out)


@dataclass(frozen=True)
class HungWait:
    """A try that was on an engine while it was stopped, and how long its client then
    waited for its next token, answer or error (from the stop, or its send if later)."""

    wait_s: float
    bound_s: float
    t: Try
    after_stop_s: float
    backends: int
    resumed: int

    def describe(self) -> str:
        t = self.t
        return (f"{self.wait_s:.2f} s: {t.client}, {t.max_tokens} tokens (got {t.tokens}, "
                f"{t.outcome}), {self.after_stop_s:.2f} s after the stop, "
                f"{self.backends} backends, {self.resumed} resumes")  # fmt: skip


def _hung_waits(
    cfg: ChaosConfig, tries: list[Try], lines: dict[str, dict[str, Any]], done: list[Done],
    urls: list[str],
) -> list[HungWait]:  # fmt: skip
    """Each try on a stopped engine, with its bound: a stream's next token is due within
    max(first-token floor, stall deadline) + margin; a non-streamed answer is silent until
    whole, so its deadline is the documented one for it (max(floor, factor x max_tokens at
    `decode_tokens_per_s`)) + margin."""
    out = []
    for d in done:
        if d.fault.kind != "engine_stop":
            continue
        names = {urls[d.fault.target], f"backend-{d.fault.target}"}
        for t in tries:
            line = lines.get(t.rid or "")
            if line is None or not names & set(line["backends"]):
                continue
            if t.progress[-1] <= d.start or t.sent >= d.back:
                continue
            since = max(d.start, t.sent)
            bound = cfg.hung_bound_s
            if not t.stream:
                whole = cfg.first_token_factor * t.max_tokens / cfg.decode_tokens_per_s
                bound = max(cfg.first_token_floor_s, whole) + cfg.margin_s
            wait = min(p for p in t.progress if p > since) - since
            out.append(HungWait(wait, bound, t, since - d.start, len(line["backends"]),
                                line["failover_resumes"]))  # fmt: skip
    return out


def _p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else 0.0


def _quiet(fleet: Fleet, wait_s: float = 20.0) -> dict[str, float]:
    """What is still in flight, queued, leased or running (polled until none, or `wait_s`):
    the gateways' gauges, the engines' vLLM gauges, Redis' lease sets."""
    deadline = time.monotonic() + wait_s
    while True:
        left: dict[str, float] = {}
        for i, g in enumerate(fleet.gateway_urls()):
            m = scrape(g)
            for name in ("burstguard_in_flight_requests", "burstguard_in_flight_tokens",
                         "llm_request_queue_depth", "burstguard_backend_in_flight"):  # fmt: skip
                if v := metric_sum(m, name):
                    left[f"gateway {i} {name}"] = v
        for i, e in enumerate(fleet.engine_urls()):
            m = scrape(e)
            for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                if v := metric_sum(m, name):
                    left[f"engine {i} {name}"] = v
        client = fleet.redis.client()
        if leases := sum(int(client.zcard(k)) for k in client.scan_iter("burstguard:leases:*")):
            left["redis leases"] = leases
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _expected(t: Try) -> str:
    """The gateway outcome a client's answer stands for (docs/gateway.md, "Data path")."""
    if t.outcome == "completed":
        return "completed"
    if t.status == 429 or (t.status == 503 and t.code == "shutdown"):
        return "rejected"
    return "failed"  # a backend's failure: its 5xx, or an in-band error event


def check(fleet: Fleet, clients: Clients, done: list[Done]) -> tuple[list[Check], dict[str, Any]]:
    cfg, tries = fleet.cfg, clients.tries
    checks: list[Check] = []
    figures: dict[str, Any] = {}

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append(Check(name, ok, detail))

    left = _quiet(fleet)  # first: log lines and counters are final once nothing is open

    # 1. every try has exactly one final outcome at its client, and a good one
    figures["tries"] = len(tries)
    figures["client_outcomes"] = dict(Counter(t.outcome for t in tries))
    not_one = [t for t in tries if t.ends != 1]
    add("one final outcome per try at its client", not not_one,
        f"{len(tries)} tries, {len(not_one)} with none or several")  # fmt: skip
    bad = [t for t in tries if t.outcome in BAD]
    add(
        "no reset, EOF without an answer, truncated or lost text, client timeout",
        not bad,
        f"{len(bad)} bad" + "".join(f"; {t.outcome} {t.detail}" for t in bad[:5]),
    )

    # 2. every admitted try has exactly one log line, and every line is a client's try
    all_lines = [ln for folders in fleet.incarnations for f in folders for ln in log_lines(f)]
    ids = Counter(ln["id"] for ln in all_lines)
    lines = {ln["id"]: ln for ln in all_lines}
    answered = [t for t in tries if t.outcome not in ("refused", None, *BAD)]
    no_rid = [t for t in answered if not t.rid]
    missing = [t for t in answered if t.rid and t.rid not in lines]
    rids = {t.rid for t in tries}
    strays = [i for i in ids if i not in rids]
    twice = [i for i, n in ids.items() if n > 1]
    add("one log line per admitted try", not (no_rid or missing or strays or twice),
        f"{len(answered)} answered tries, {len(all_lines)} log lines; {len(no_rid)} answers "
        f"without an id, {len(missing)} without a line, {len(strays)} lines of no try, "
        f"{len(twice)} ids twice")  # fmt: skip

    # 3. each line says what its client got: outcome, status, tokens (a broken answer's
    # line too: at least its tokens)
    wrong = []
    answered_n = {t.n for t in answered}
    for t in tries:
        ln = lines.get(t.rid or "")
        if ln is None:
            continue
        got = (ln["outcome"], ln["status"], ln["output_tokens"])
        want = (_expected(t), t.status, t.tokens) if t.n in answered_n else (*got[:2], t.tokens)
        if got != want:
            wrong.append((t.outcome, t.status, t.code, t.tokens, ln["outcome"], ln["status"],
                          ln["reason"], ln["output_tokens"]))  # fmt: skip
    add(
        "each log line matches its client (outcome, status, tokens)",
        not wrong,
        f"{len(wrong)} differ" + (f", e.g. {wrong[:3]}" if wrong else ""),
    )

    # 4. totals per outcome: clients = log lines = llm_request_total; a restarted gateway's
    # counters went with its process, so its log stands for them (and its last scrape
    # before the SIGTERM may not be ahead of its log)
    client_totals = Counter(_expected(t) for t in answered)
    log_totals = Counter(ln["outcome"] for ln in all_lines)
    counted: Counter[str] = Counter()
    consistent = True
    for i, folders in enumerate(fleet.incarnations):
        for k, folder in enumerate(folders):
            mine = Counter(ln["outcome"] for ln in log_lines(folder))
            if k == len(folders) - 1:
                metrics = by_label(scrape(fleet.gateway_urls()[i]), "llm_request_total", "outcome")
                counted += metrics
                consistent &= +metrics == +mine
            else:
                counted += mine
    for pre in fleet.pre_stop_scrapes:
        before = by_label(pre, "llm_request_total", "outcome")
        consistent &= all(v <= log_totals[k] for k, v in before.items())
    figures["gateway_outcomes"] = dict(log_totals)
    add("client outcomes = log lines = llm_request_total, per outcome",
        +client_totals == +log_totals == +counted and consistent,
        f"clients {dict(client_totals)}, logs {dict(log_totals)}, counters "
        f"{dict(counted)} (a restarted gateway's: its log)")  # fmt: skip

    # 5. quiet after the run
    add(
        "after the run: in-flight gauges 0, Redis holds no lease, no engine runs a request",
        not left,
        f"left: {left}" if left else "all 0",
    )

    # 6. no 5xx, no in-band error, but those the docs name for a fault under way
    errors = [t for t in answered if t.status >= 500 or t.outcome == "stream_error"]

    def explained(t: Try) -> bool:
        return any(
            t.code in FAULT_CODES[d.fault.kind]
            and (d.fault.kind != "gateway_restart" or d.fault.target == t.gateway)
            and t.sent <= d.back + 3.0 and t.progress[-1] >= d.start
            for d in done
        )  # fmt: skip

    unexplained = [t for t in errors if not explained(t)]
    figures["errors_by_code"] = dict(Counter(f"{t.status}/{t.code}" for t in errors))
    t0 = min((t.sent for t in tries), default=0.0)
    add("every 5xx or in-band error is one the docs name for a fault under way",
        not unexplained, f"{len(errors)} errors, {len(unexplained)} unexplained"
        + "".join(f"; {t.status} {t.code} at +{t.sent - t0:.1f} s"
                  for t in unexplained[:5]))  # fmt: skip

    # 7. whole answers are exact, resumed streams too; a cut stream is short
    whole = [t for t in tries if t.outcome == "completed"]
    resumed = [t for t in whole if (lines.get(t.rid or "") or {}).get("failover_resumes")]
    over = [t for t in tries if t.outcome == "stream_error" and t.tokens >= t.max_tokens]
    figures["resumed_streams"] = len(resumed)
    add("no stream duplicated or lost text",
        not over and all(t.tokens == t.max_tokens for t in whole),
        f"{len(whole)} whole answers of exactly max_tokens ({len(resumed)} resumed on "
        f"another engine), {len(over)} cut streams at or past max_tokens")  # fmt: skip

    # 8. the wait on a hung engine
    hung = _hung_waits(cfg, tries, lines, done, fleet.engine_urls())
    stops = sum(1 for d in done if d.fault.kind == "engine_stop")
    for kind in ("stream", "non-stream"):
        stopped_tries = [w for w in hung if w.t.stream == (kind == "stream")]
        waits = [w.wait_s for w in stopped_tries]
        p99, worst = _p99(waits), max(waits, default=0.0)
        late = sorted((w for w in stopped_tries if w.wait_s > w.bound_s), key=lambda w: -w.wait_s)
        figures[f"hung_waits_{kind}"] = {
            "n": len(waits), "p99_s": round(p99, 2), "max_s": round(worst, 2),
            "over_bound": len(late),
        }  # fmt: skip
        bound = (f"{cfg.hung_bound_s:.1f} s" if kind == "stream" else
                 f"max(floor, {cfg.first_token_factor:g} x max_tokens / "
                 f"{cfg.decode_tokens_per_s:g}/s) + {cfg.margin_s:g} s")  # fmt: skip
        add(f"p99 wait of a {kind} try on a stopped engine within its deadline + margin",
            _p99([w.wait_s - w.bound_s for w in stopped_tries]) <= 0 and (bool(hung) or not stops),
            f"{len(waits)} tries: p99 {p99:.2f} s, max {worst:.2f} s; bound {bound}; "
            f"{len(late)} over it" + "".join(f"; {w.describe()}" for w in late[:3]))  # fmt: skip

    figures["circuit_log_lines"] = sum(
        1 for folders in fleet.incarnations for f in folders
        for x in next(f.glob("gateway-*.log")).read_text().splitlines() if ": circuit " in x
    )  # fmt: skip
    return checks, figures


def _dump(path: Path, tries: list[Try], t0: float) -> None:
    """Every try's record (times from the load's start), for a look after the run."""
    with path.open("w") as out:
        for t in tries:
            gaps = [b - a for a, b in zip(t.progress, t.progress[1:], strict=False)]
            row = {k: v for k, v in vars(t).items() if k != "progress"}
            row.update(sent=round(t.sent - t0, 3), ended=round(t.progress[-1] - t0, 3),
                       longest_silence_s=round(max(gaps, default=0.0), 3))  # fmt: skip
            out.write(json.dumps(row) + "\n")


async def run_chaos(cfg: ChaosConfig, workdir: Path, plan: list[Fault] | None = None) -> Report:
    """Starts the fleet, sends the load while the plan runs, checks, stops everything."""
    plan = fault_plan(cfg.duration_s, cfg.seed) if plan is None else plan
    fleet = Fleet(cfg, workdir)
    done: list[Done] = []
    try:
        await asyncio.to_thread(fleet.start)
        async with Clients(cfg, fleet.gateway_urls()) as clients:
            t0 = time.monotonic()
            faults = [asyncio.ensure_future(fleet.inject(f, t0, done)) for f in plan]
            await clients.run(t0 + cfg.duration_s, random.Random(cfg.seed))
            await asyncio.gather(*faults)
            checks, figures = await asyncio.to_thread(check, fleet, clients, done)
            _dump(workdir / "tries.jsonl", clients.tries, t0)
    finally:
        await asyncio.to_thread(fleet.stop)
    return Report(cfg, plan, done, clients.tries, clients.calls, checks, figures)
