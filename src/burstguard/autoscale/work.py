"""Token work from the gateway's counters: what arrives to be served, and what was served.

Two kinds of work cost a replica differently: prompt tokens to prefill and output tokens
to decode. The prompt is known as a request arrives (`burstguard_prompt_tokens_total`);
its output only as it completes (`burstguard_output_tokens_total`, with
`burstguard_completed_prompt_tokens_total` for the prompts of those same requests).
So the decode work arriving is the prompt tokens arriving times the output-to-prompt
ratio of recent completions (never the completions' own rate: under overload that is
the fleet's throughput, not the demand). The served work (prompt + output tokens of
completed requests) is what the capacity learner divides by replica-seconds.

Without the token counters (a feed of request counts only) every request is one unit
of work and nothing is served in tokens: the policy then works in requests per second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from burstguard.autoscale.policy import Signals

__all__ = ["WorkMeter", "WorkSample"]

PROMPT = "burstguard_prompt_tokens_total"
COMPLETED_PROMPT = "burstguard_completed_prompt_tokens_total"
OUTPUT = "burstguard_output_tokens_total"
DEFAULT_OUTPUT_RATIO = 0.25  # output per prompt token before any completion (512/128)


@dataclass(frozen=True, slots=True)
class WorkSample:
    """One interval's rates (per second) and the mix now."""

    dt: float
    requests: float  # arrivals/s
    prompt: float  # prompt tokens arriving/s (tokens mode) or arrivals/s
    output: float  # output tokens arriving/s, as the recent output-to-prompt ratio says
    served: float  # tokens served (completed prompt + output) in the interval
    prompt_per_request: float  # the recent mix (1 and 0 in requests mode)
    output_per_request: float


class WorkMeter:
    """Differences the counters each tick; keeps the mix over `mix_window_s`."""

    def __init__(self, arrivals_metric: str, mix_window_s: float) -> None:
        self.arrivals_metric = arrivals_metric
        self.mix_window_s = mix_window_s
        self._last: tuple[float, ...] | None = None
        self._last_at = 0.0
        # (time, arrivals, prompt tokens, completed prompt, output) per interval
        self._mix: deque[tuple[float, float, float, float, float]] = deque()
        self.tokens = False  # the feed carries the token counters
        self._ratio = DEFAULT_OUTPUT_RATIO  # the last known mix, kept through idle spells
        self._per_request = 0.0

    def update(self, now: float, signals: Signals) -> WorkSample | None:
        """The interval since the last update (None on the first, or if no time passed)."""
        self.tokens = PROMPT in signals
        cur = (
            signals.get(self.arrivals_metric, 0.0),
            signals.get(PROMPT, 0.0),
            signals.get(COMPLETED_PROMPT, 0.0),
            signals.get(OUTPUT, 0.0),
        )
        last, last_at = self._last, self._last_at
        self._last, self._last_at = cur, now
        if last is None or now <= last_at:
            return None
        dt = now - last_at
        d = [max(c - p, 0.0) for c, p in zip(cur, last, strict=True)]
        self._mix.append((now, d[0], d[1], d[2], d[3]))
        while self._mix and self._mix[0][0] <= now - self.mix_window_s:
            self._mix.popleft()
        if not self.tokens:
            return WorkSample(dt, d[0] / dt, d[0] / dt, 0.0, 0.0, 1.0, 0.0)
        ratio, per_request = self.output_ratio(), self.prompt_per_request()
        return WorkSample(
            dt, d[0] / dt, d[1] / dt, d[1] * ratio / dt, d[2] + d[3],
            per_request, per_request * ratio,
        )  # fmt: skip

    def output_ratio(self) -> float:
        """Output per prompt token among the window's completions (the last known when
        none completed in it; a default before any)."""
        prompt = sum(m[3] for m in self._mix)
        if prompt > 0:
            self._ratio = sum(m[4] for m in self._mix) / prompt
        return self._ratio

    def prompt_per_request(self) -> float:
        """Mean prompt of the window's arrivals (the last known when none arrived)."""
        arrivals = sum(m[1] for m in self._mix)
        if arrivals > 0:
            self._per_request = sum(m[2] for m in self._mix) / arrivals
        return self._per_request
