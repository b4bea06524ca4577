"""Token work from the gateway's counters: what arrives to be served, and what was served.

Two kinds of work cost a replica differently: prompt tokens to prefill and output tokens
to decode. The prompt is known as a request arrives (`burstguard_prompt_tokens_total`);
its output only as it completes (`burstguard_output_tokens_total`, with
`burstguard_completed_prompt_tokens_total` for the prompts of those same requests).
So the decode work arriving is the prompt tokens arriving times the output-to-prompt
ratio of recent completions (never the completions' own rate: under overload that is
the fleet's throughput, not the demand). Prompts the backends refuse (longer than the
model's context) are no work: the arriving prompt tokens count at the share of recent
answers' prompt tokens that were served. The served work (prompt + output tokens of
completed requests) is what the capacity learner divides by replica-seconds.

Without the token counters (a feed of request counts only) every request is one unit
of work and nothing is served in tokens: the policy then works in requests per second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from burstguard.core.scaling.policy import Signals

__all__ = ["WorkMeter", "WorkSample"]

PROMPT = "burstguard_prompt_tokens_total"
REFUSED = "burstguard_refused_prompt_tokens_total"
COMPLETED = "burstguard_completed_requests_total"
COMPLETED_PROMPT = "burstguard_completed_prompt_tokens_total"
OUTPUT = "burstguard_output_tokens_total"
DEFAULT_OUTPUT_RATIO = 0.25  # output per prompt token before any completion (512/128)


@dataclass(frozen=True, slots=True)
class WorkSample:
    """One interval's rates (per second) and the mix now."""

    dt: float
    requests: float  # arrivals/s
    prompt: float  # prompt tokens arriving/s, less the refused (or arrivals/s: count feed)
    output: float  # output tokens arriving/s, as the recent output-to-prompt ratio says
    served: float  # tokens served (completed prompt + output) in the interval
    prompt_per_request: float  # the mix served recently (0 and 0 on a count feed)
    output_per_request: float
    served_mix: tuple[float, float] | None  # prompt, output per request served in it


class WorkMeter:
    """Differences the counters each tick; keeps the mix over `mix_window_s`."""

    def __init__(self, arrivals_metric: str, mix_window_s: float) -> None:
        self.names = (arrivals_metric, PROMPT, REFUSED, COMPLETED, COMPLETED_PROMPT, OUTPUT)
        self.mix_window_s = mix_window_s
        self._last: list[float] | None = None
        self._last_at = 0.0
        self._mix: deque[tuple[float, list[float]]] = deque()  # (time, counter deltas)
        self._sums = [0.0] * len(self.names)
        self.tokens = False  # the feed carries the token counters
        # the last known mix, kept through idle spells
        self._ratio = DEFAULT_OUTPUT_RATIO
        self._servable = 1.0  # the share of arriving prompt tokens the backends accept
        self._prompt = 0.0
        self._output = 0.0

    def update(self, now: float, signals: Signals) -> WorkSample | None:
        """The interval since the last update (None on the first, or if no time passed)."""
        self.tokens = PROMPT in signals
        cur = [signals.get(name, 0.0) for name in self.names]
        last, last_at = self._last, self._last_at
        self._last, self._last_at = cur, now
        if last is None or now <= last_at:
            return None
        dt = now - last_at
        d = [max(c - p, 0.0) for c, p in zip(cur, last, strict=True)]
        self._mix.append((now, d))
        self._sums = [a + b for a, b in zip(self._sums, d, strict=True)]
        while self._mix and self._mix[0][0] <= now - self.mix_window_s:
            _, old = self._mix.popleft()
            self._sums = [a - b for a, b in zip(self._sums, old, strict=True)]
        if not self.tokens:
            return WorkSample(dt, d[0] / dt, d[0] / dt, 0.0, 0.0, 0.0, 0.0, None)
        arrivals, prompt, refused, completed, done_prompt, output = self._sums
        if refused + done_prompt > 0:
            self._servable = done_prompt / (refused + done_prompt)
        if completed > 0 and done_prompt > 0:
            self._ratio = output / done_prompt
            self._prompt, self._output = done_prompt / completed, output / completed
        elif arrivals > 0 and self._prompt == 0:  # nothing served yet: the arrivals' prompts
            self._prompt = max(prompt - refused, 0.0) / arrivals
            self._output = self._prompt * self._ratio
        demand = d[1] * self._servable
        served_mix = (d[4] / d[3], d[5] / d[3]) if d[3] > 0 else None
        return WorkSample(
            dt, d[0] / dt, demand / dt, demand * self._ratio / dt, d[4] + d[5],
            self._prompt, self._output, served_mix,
        )  # fmt: skip

    @property
    def tokens_per_request(self) -> float:
        """The recent mix's tokens per request (1 on a count feed)."""
        return self._prompt + self._output if self.tokens and self._prompt > 0 else 1.0
