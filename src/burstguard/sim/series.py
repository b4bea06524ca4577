"""The engine-side series of a simulated run, as bench scrapes them from a live engine.

A sim run then carries the same `server_series` block (docs/formats.md) as a bench run
with `--scrape-metrics`: vLLM's metric names, columnar, `t` in engine seconds. compare
reads its queue drain and KV peak from it, and diagnose walks it as it walks a live run.
The drivers call `observe` after every step (or fast-forwarded run of steps); the
recorder samples the engine's state on a fixed grid, as a scraper polling /metrics would.
"""

from __future__ import annotations

from typing import Any

from burstguard.core.engine.core import EngineCore

SAMPLE_INTERVAL_S = 0.5
"""Grid of the samples, engine seconds (bench scrapes every second of target time)."""

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
STEP_TOKENS_SUM = "vllm:iteration_tokens_total_sum"
STEP_COUNT = "vllm:iteration_tokens_total_count"
COLUMNS = (WAITING, RUNNING, KV_USAGE, PREEMPTIONS, STEP_TOKENS_SUM, STEP_COUNT)


class SeriesRecorder:
    """Samples an EngineCore's gauges and counters every `interval_s` of engine time.

    A sample at grid time t holds the state after the last step that ended at or before t
    (the state a scrape at t would read). Tokens per step are kept as vLLM's cumulative
    `vllm:iteration_tokens_total` sum and count, so a reader divides their increments.
    """

    def __init__(self, core: EngineCore, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.core = core
        self.interval_s = interval_s
        self.columns: dict[str, list[float]] = {"t": [], **{c: [] for c in COLUMNS}}
        self._tokens = 0
        self._steps = 0
        self._state = self._read()
        self._next_t = 0.0

    def _read(self) -> tuple[float, ...]:
        """The gauges, read straight from the core (this runs after every step)."""
        core = self.core
        sched = core.scheduler
        return (
            float(len(sched.waiting)),
            float(len(sched.running)),
            core.pool.usage,
            float(core.num_preemptions),
            float(self._tokens),
            float(self._steps),
        )

    def observe(self, now: float, tokens: int = 0, steps: int = 0) -> None:
        """The engine's state changed at `now` after `steps` steps that computed `tokens`
        tokens (prefill and decode): samples due before `now` keep the previous state."""
        if now > self._next_t:
            self._fill_until(now)
        self._tokens += tokens
        self._steps += steps
        self._state = self._read()

    def _fill_until(self, t: float) -> None:
        times = self.columns["t"]
        next_t = len(times) * self.interval_s
        while next_t < t:
            times.append(round(next_t, 6))
            for name, value in zip(COLUMNS, self._state, strict=True):
                self.columns[name].append(value)
            next_t = len(times) * self.interval_s
        self._next_t = next_t

    def series(self, end_s: float) -> dict[str, Any]:
        """The `server_series` block, sampled up to and including `end_s`."""
        self._fill_until(end_s + self.interval_s)
        return {k: list(v) for k, v in self.columns.items()}
