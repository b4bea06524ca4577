"""burstguard.client: the retry/backoff helper applications can use in front of an LLM API."""

from burstguard.client.retry import (
    RETRY_COUNT_HEADER,
    RetryableFailure,
    RetryBudget,
    RetryDecision,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
    retry_headers,
)

__all__ = [
    "RETRY_COUNT_HEADER",
    "RetryBudget",
    "RetryDecision",
    "RetryPolicy",
    "RetryableFailure",
    "call_with_retries",
    "parse_retry_after",
    "retry_headers",
]
