"""How a backend fails a request, as the gateway's relay sees it: one list both shells use.

The live server classifies what its HTTP client reports (`live.gateway.errors.failure_of`), the
simulator what its fault schedule does to a replica (`sim.faults`); both hand the core the
same `BackendFailed(reason)` and answer an abandoned client with the same status and
error code, so the core's failure rules (failover, the retry budget, the circuit breaker)
see the same events in virtual time as live. A backend's own 5xx answer is one more kind;
its client answer comes from the backend's body (`live.gateway.errors.upstream_error`).
"""

from __future__ import annotations

import enum
from typing import Any


class Failure(enum.Enum):
    """A failure kind: (the core's reason, the client's status, error code, message)."""

    REFUSED = ("connect", 503, "backend_unreachable", "the backend is unreachable")
    RESET = ("reset", 502, "backend_error", "the backend connection failed")
    TIMEOUT = ("timeout", 504, "backend_timeout", "the backend did not answer in time")
    CUT_STREAM = ("reset", 502, "backend_cut_stream", "the backend ended the stream early")
    NOT_JSON = ("bad_answer", 502, "bad_answer", "the backend's answer was not JSON")
    STATUS_5XX = ("status_5xx", 502, "backend_error", "the backend failed")
    # decided by the core (`backend_deadlines`), not seen by a shell: `Abort` names them
    NO_FIRST_TOKEN = ("timeout", 504, "backend_timeout",
                      "the backend sent no first token within its deadline")  # fmt: skip
    STALLED = ("timeout", 504, "backend_stalled", "the backend's stream stalled")
    CIRCUIT_OPEN = ("circuit_open", 503, "backend_unreachable",
                    "the backend was taken out of rotation")  # fmt: skip

    @property
    def reason(self) -> str:
        """What `BackendFailed.reason` says (one of `fleet.FAILURE_REASONS`)."""
        return str(self.value[0])

    @property
    def status(self) -> int:
        """The HTTP status a client gets when the core abandons the request."""
        return int(self.value[1])

    @property
    def code(self) -> str:
        return str(self.value[2])

    def error(self) -> dict[str, Any]:
        """OpenAI's error body for this failure (what a failing backend said is logged,
        never passed on)."""
        return {"error": {"message": self.value[3], "type": "upstream_error", "param": None,
                          "code": self.code}}  # fmt: skip
