"""Prometheus text-format scraping: one parser for vLLM's, the emulator's and the gateway's
/metrics, and a poller that records a time series of the serving-side view.

Sample keys keep Prometheus' identity: the metric name followed by its labels sorted by
name, e.g. `vllm:num_requests_waiting{engine="0",model_name="m"}`; `metric_sum` adds a
metric up over all its label sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import aiohttp

# The serving-side signals bench stores: vLLM's names (v1 and the older KV name) and the
# gateway's queue depth. A name absent from a target's /metrics is simply not recorded.
DEFAULT_SERIES: tuple[str, ...] = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:iteration_tokens_total_sum",
    "vllm:iteration_tokens_total_count",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "llm_request_queue_depth",
)

_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)  # float() accepts "NaN"


def _parse_labels(text: str, line: str) -> str:
    """Labels body (without braces) -> canonical `a="x",b="y"`, sorted by name."""
    pairs: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _LABEL.match(text, pos)
        if not match:
            raise ValueError(f"bad labels in metrics line: {line!r}")
        pairs.append((match.group(1), match.group(2)))
        pos = match.end()
    pairs.sort()
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def parse_metrics(text: str, only: tuple[str, ...] | None = None) -> dict[str, float]:
    """Parses Prometheus text exposition into {sample key: value}.

    Comments, blank lines and timestamps are dropped. A malformed line raises ValueError
    quoting it, so a non-Prometheus answer is reported instead of silently ignored.
    `only` keeps the lines that start with one of those names and skips the rest unparsed
    (an engine's /metrics is mostly histogram buckets a poller does not need).
    """
    samples: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or (only is not None and not line.startswith(only)):
            continue
        brace = line.find("{")
        if brace != -1 and brace < (line.find(" ") if " " in line else len(line)):
            close = line.rfind("}")
            if close < brace:
                raise ValueError(f"bad metrics line: {raw!r}")
            name = line[:brace].strip()
            labels = _parse_labels(line[brace + 1 : close], raw)
            rest = line[close + 1 :].split()
            key = f"{name}{{{labels}}}" if labels else name
        else:
            parts = line.split()
            name, rest = parts[0], parts[1:]
            key = name
        if not rest or not name:
            raise ValueError(f"bad metrics line: {raw!r}")
        try:
            samples[key] = _parse_value(rest[0])
        except ValueError:
            raise ValueError(f"bad metrics value in line: {raw!r}") from None
    return samples


def metric_sum(samples: dict[str, float], name: str) -> float | None:
    """Sum of `name` over all its label sets; None when the metric is absent."""
    total: float | None = None
    prefix = name + "{"
    for key, value in samples.items():
        if key == name or key.startswith(prefix):
            total = value if total is None else total + value
    return total


@dataclass(slots=True)
class MetricsSample:
    """One scrape: `t` seconds since the poller's origin, summed value per series name."""

    t: float
    values: dict[str, float]


@dataclass
class MetricsPoller:
    """Polls a /metrics URL every `interval_s` and keeps the chosen series.

    Failed scrapes are counted (`errors`, `last_error`), not raised: a run must not die
    because the metrics endpoint hiccupped. `sink`, if set, receives each sample as a JSON
    line (bench writes DIR/metrics.jsonl with it).
    """

    url: str
    interval_s: float = 1.0
    names: Sequence[str] = DEFAULT_SERIES
    timeout_s: float = 2.0
    origin: float = field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic
    sink: IO[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)  # e.g. a metrics key's bearer
    samples: list[MetricsSample] = field(default_factory=list)
    errors: int = 0
    last_error: str | None = None
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)

    @property
    def latest(self) -> MetricsSample | None:
        return self.samples[-1] if self.samples else None

    async def poll_once(self) -> MetricsSample | None:
        """Scrapes once; returns the sample, or None (and counts an error) on failure."""
        session = self._session or aiohttp.ClientSession()
        owned = self._session is None
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with session.get(self.url, timeout=timeout, headers=self.headers) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
            parsed = parse_metrics(body)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        finally:
            if owned:
                await session.close()
        values = {n: v for n in self.names if (v := metric_sum(parsed, n)) is not None}
        sample = MetricsSample(round(self.clock() - self.origin, 6), values)
        self.samples.append(sample)
        if self.sink is not None:
            self.sink.write(json.dumps({"t": sample.t, **values}) + "\n")
            self.sink.flush()
        return sample

    async def _loop(self) -> None:
        next_at = self.clock()
        while True:
            await self.poll_once()
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - self.clock()))

    def start(self) -> None:
        """Starts polling in the background on the running loop."""
        if self._task is None:
            self._session = aiohttp.ClientSession()
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def series(self) -> dict[str, Any]:
        """Column form for summaries: {"t": [...], name: [value or None, ...]}."""
        present = [n for n in self.names if any(n in s.values for s in self.samples)]
        out: dict[str, Any] = {"t": [s.t for s in self.samples]}
        for name in present:
            out[name] = [s.values.get(name) for s in self.samples]
        return out
