"""The gateway's error answers: OpenAI's shape for its own refusals and a backend's failures.

Every error a client gets is `{"error": {"message", "type", "param", "code"}}` with the
right status: 400 bad input, 401 no key, 413 too large, 429 shed (with Retry-After), 502 a
backend failure, 503 no backend, 504 a backend timeout. Never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any

import orjson

from burstguard.gateway.failure import Failure
from burstguard.http.client import Unreachable, UpstreamError, UpstreamTimeout
from burstguard.http.server import Header, Responder
from burstguard.wire.outcomes import Reason

log = logging.getLogger("burstguard.gateway")

JSON_HEADER = ("content-type", "application/json")


def json_bytes(obj: Any) -> bytes:
    return orjson.dumps(obj)  # no recursion limit to hit on a deeply nested client body


def send_json(resp: Responder, status: int, obj: Any, headers: tuple[Header, ...] = ()) -> None:
    resp.send(status, json_bytes(obj), [JSON_HEADER, *headers])


def send_error(
    resp: Responder, status: int, message: str, err_type: str, code: str | None = None,
    headers: tuple[Header, ...] = (),
) -> None:  # fmt: skip
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    err = {"message": message, "type": err_type, "param": None, "code": code}
    send_json(resp, status, {"error": err}, headers)


def retry_after_header(seconds: float | None) -> str:
    """Retry-After as delta-seconds: rounded up, at least 1."""
    if seconds is None or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


SHED_MESSAGES = {
    Reason.QUEUE_FULL: "the gateway queue is full",
    Reason.DEADLINE: "the {cls} queue cannot start this request before its deadline",
    Reason.EVICTED: "shed from the gateway queue to make room for higher-priority requests",
    Reason.NO_BACKEND: "no backend has been healthy for a while (all are down)",
}


def send_shed(resp: Responder, cls: str, reason: Reason, retry_s: float | None, rid: str) -> int:
    """429 with Retry-After (wall seconds) for a request the core shed; returns the
    Retry-After sent, in seconds."""
    header = retry_after_header(retry_s)
    msg = SHED_MESSAGES[reason].format(cls=cls)
    send_error(resp, 429, f"{msg}; retry after {header} s", "rate_limit_exceeded", reason,
               (("retry-after", header), ("x-request-id", rid)))  # fmt: skip
    return int(header)


def upstream_error(status: int, body: bytes) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-shaped body a client gets for a backend's non-200 answer.

    Client errors (4xx) keep their status and, when the backend already sent OpenAI's
    shape, its body; server errors become 502 (503 stays 503), naming only the backend
    status: what a failing backend says (a traceback, its paths) is logged, not passed on.
    """
    message = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    err: dict[str, Any] = {}
    with contextlib.suppress(ValueError, AttributeError):
        data = orjson.loads(body)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            err = dict(data["error"])
        elif isinstance(data, dict) and "message" in data:  # vLLM's older {"object": "error"}
            err = {"message": data["message"], "type": data.get("type"), "code": data.get("code")}
    if 400 <= status < 500:
        out = {
            "message": str(err.get("message") or message),
            "type": str(err.get("type") or "invalid_request_error"),
            "param": err.get("param"),
            "code": None if err.get("code") is None else str(err.get("code")),
        }
        return status, {"error": out}
    mapped = 503 if status == 503 else 502
    log.warning("backend answered HTTP %d: %s", status, err.get("message") or message)
    out = {
        "message": f"backend answered HTTP {status}",
        "type": "upstream_error",
        "param": None,
        "code": f"backend_{status}",
    }
    return mapped, {"error": out}


def failure_of(exc: UpstreamError) -> Failure:
    """The failure kind of a failure to talk to the backend (refused, timed out, reset).
    The details (its address, the OS error) are logged, not told to the client."""
    log.warning("backend failed: %s", exc)
    if isinstance(exc, UpstreamTimeout):
        return Failure.TIMEOUT
    if isinstance(exc, Unreachable):
        return Failure.REFUSED
    return Failure.RESET
