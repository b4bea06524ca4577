"""What burstguard reads in an OpenAI-compatible SSE stream from the bytes, without a JSON
parse per event (the bench client and the gateway both read every token's event)."""

from __future__ import annotations

import re

# The last choice chunk says why generation ended (stop, length, ...). A stream that reaches
# [DONE] without one was cut short by the server (llama-cpp-python ends the running stream
# that way when another request arrives), which a token count alone would hide.
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"')


def says_why_it_ended(data: bytes) -> bool:
    """`data` (an event, or a stream's tail) carries a non-null finish_reason."""
    return _FINISH_REASON.search(data) is not None
