"""burstguard.client: the retry/backoff helper applications can use in front of an LLM API."""

from burstguard.client.retry import (
    RetryableFailure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
)

__all__ = [
    "RetryBudget",
    "RetryDecision",
    "RetryPolicy",
    "RetryableFailure",
    "call_with_retries",
    "parse_retry_after",
]
