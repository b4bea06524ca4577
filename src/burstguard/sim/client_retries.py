"""Simulated clients that retry, as `burstguard bench --retry` does: a request that ends
with an error its client may retry (a 429 or 5xx, an error event in its stream) is sent
again after the policy's backoff (full jitter, at least the Retry-After it was told), up to
`max_retries` times and within the retry budget, as a new request of the same content.

Each try runs in the simulation as a request of its own (`<id>~<n>`: the gateway and the
engines see a new request, as they do live); the client's record is one per request, as
bench writes it: the last try's answer, its times counted from the first try, `retries`
and one `attempts` entry per failed try.

Delays are the client's (wall) seconds, run in the simulator's time: an engine sped up
`time_scale` times (`gateway.engine_speedup`, the emulator's `--speedup`) sees a client's
0.5 s backoff as `0.5 * time_scale` of its own seconds, and the Retry-After the gateway
computes on its clock reaches the client divided by it and rounded up to whole seconds,
as the live gateway sends it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from burstguard.client.retry import RetryBudget, RetryPolicy
from burstguard.wire.headers import retry_after_seconds
from burstguard.wire.records import RequestRecord

TRY_SEPARATOR = "~"


@dataclass(frozen=True, slots=True)
class ClientRetry:
    """What the simulated clients do on an error: bench's `--retry` options."""

    policy: RetryPolicy
    budget_ratio: float | None = None  # bench's --retry-budget: retries per request


class RetryingClients:
    """The clients' side of every request's tries: which try of which request an id is,
    the retry decisions, and the one record per request at the end."""

    def __init__(self, retry: ClientRetry, time_scale: float, seed: int) -> None:
        self.policy = retry.policy
        self.time_scale = time_scale
        self.rng = random.Random(seed)
        self._now = 0.0
        self.budget = (
            None
            if retry.budget_ratio is None
            else RetryBudget(ratio=retry.budget_ratio, clock=lambda: self._now / time_scale)
        )
        self._first: dict[str, str] = {}  # a retry's id -> its request's (first try's) id
        self._attempts: dict[str, list[dict[str, Any]]] = {}  # a request's failed tries
        self._ended: set[str] = set()  # tries answered (each decided once)
        self.pending = 0  # retries decided, not yet sent
        self.sent = 0  # retries sent

    def first(self, rid: str) -> str:
        """The request a try belongs to (its own id for a first try)."""
        return self._first.get(rid, rid)

    def on_request(self, now: float) -> None:
        """A request's first try is sent (the budget counts requests)."""
        self._now = now
        if self.budget is not None:
            self.budget.on_request()

    def retry(self, rid: str, rec: RequestRecord, now: float) -> tuple[str, float] | None:
        """Try `rid` ended with `rec`'s answer: (the id of the retry its client sends,
        the simulator-time delay before it is sent), or None (completed, or not retried:
        this is the request's answer)."""
        if rec.error is None or rid in self._ended:
            return None
        self._ended.add(rid)
        self._now = now
        first = self.first(rid)
        n = len(self._attempts.get(first, ()))  # retries so far
        if rec.status == 200:  # an error event in a started stream: bench's kind
            status, error = None, "stream_broken"
        else:
            status, error = rec.status, f"http_{rec.status}"
        told = (  # what the live gateway's header says: whole wall seconds, at least 1
            None
            if rec.retry_after_s is None
            else retry_after_seconds(rec.retry_after_s / self.time_scale)
        )
        decision = self.policy.decide(n, status=status, error=error, retry_after_s=told,
                                      budget=self.budget, rng=self.rng)  # fmt: skip
        if not decision.retry:
            return None
        delay = decision.delay_s * self.time_scale
        self._attempts.setdefault(first, []).append({
            "sent_s": rec.scheduled_s, "status": rec.status, "error": error,  # bench's kind
            "retry_after_s": rec.retry_after_s, "delay_s": delay, "retry_s": now + delay,
        })  # fmt: skip
        retry_id = f"{first}{TRY_SEPARATOR}{n + 1}"
        self._first[retry_id] = first
        self.pending += 1
        return retry_id, delay

    def on_retry_sent(self) -> None:
        self.pending -= 1
        self.sent += 1

    def record(self, rid: str, records: dict[str, RequestRecord]) -> RequestRecord:
        """Request `rid`'s one record: its last try's answer, timed from its first try."""
        rec = records[rid]
        attempts = self._attempts.get(rid)
        if attempts is None:
            return rec
        final = records[f"{rid}{TRY_SEPARATOR}{len(attempts)}"]  # its last try
        shift = final.scheduled_s - rec.scheduled_s
        told = [a["retry_after_s"] for a in attempts if a["retry_after_s"] is not None]

        def later(t: float | None) -> float | None:
            return None if t is None else t + shift

        return replace(
            final, id=rid, scheduled_s=rec.scheduled_s, sent_s=rec.sent_s,
            ttft_s=later(final.ttft_s), e2e_s=later(final.e2e_s), queue_s=later(final.queue_s),
            retries=len(attempts), attempts=attempts,
            retry_after_s=final.retry_after_s if final.retry_after_s is not None
            else (told[-1] if told else None),
        )  # fmt: skip
