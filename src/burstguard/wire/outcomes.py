"""How a request ended, and why it was shed: the values the gateway core counts, its
metrics label (`llm_request_total{outcome}`, `burstguard_rejections_total{reason}`), its
log lines and the records write. One enum each, so a misspelt value fails where it is
written rather than as a metric series nobody queries; as `StrEnum`s their wire strings
are the strings these always were.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Outcome", "Reason"]


class Outcome(StrEnum):
    """A request's one final outcome."""

    COMPLETED = "completed"
    REJECTED = "rejected"  # shed with 429 (at arrival, evicted, or past its deadline)
    CANCELLED = "cancelled"  # its client went away
    FAILED = "failed"  # an error went to its client


class Reason(StrEnum):
    """Why a request was shed (the 429's error code) or ended early."""

    QUEUE_FULL = "queue_full"
    DEADLINE = "deadline"  # it could not start before its class's queue deadline
    EVICTED = "evicted"  # a better class's newcomer took its place in a full queue
    NO_BACKEND = "no_backend"  # every backend down longer than max_outage_wait_s
    QUOTA = "quota_exceeded"  # its tenant (or key) is over its quota (gateway.quota)
    CLIENT_STALLED = "client_stalled"  # cancelled: its client left its answer unread
    PREEMPTED = "preempted"  # failed: a better class took its slot and it could not be
    # resumed (the Endpoint Picker's preemption): a retryable error ends its answer
    SHUTDOWN = "shutdown"  # the gateway stopped (SIGTERM): 503 from the queue, or cut at
    # the end of the drain (failed, one in-band error event)
