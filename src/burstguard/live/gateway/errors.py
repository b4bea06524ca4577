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

from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.quota import Verdict
from burstguard.http.client import Unreachable, UpstreamError, UpstreamTimeout
from burstguard.http.server import Header, Responder
from burstguard.wire.headers import retry_after_seconds
from burstguard.wire.outcomes import Reason

log = logging.getLogger("burstguard.core.gateway")

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
    """Retry-After as delta-seconds: rounded up, at least 1 (`wire.headers`)."""
    return str(retry_after_seconds(seconds))


SHED_MESSAGES = {
    Reason.QUEUE_FULL: "the gateway queue is full",
    Reason.DEADLINE: "the {cls} queue cannot start this request before its deadline",
    Reason.EVICTED: "shed from the gateway queue to make room for higher-priority requests",
    Reason.NO_BACKEND: "no backend has been healthy for a while (all are down)",
    Reason.SHUTDOWN: "this gateway replica is shutting down",
}

SHUTDOWN_ERROR = {"error": {"message": "this gateway replica is shutting down; retry the "
                            "request", "type": "service_unavailable", "param": None,
                            "code": Reason.SHUTDOWN.value}}  # fmt: skip
"""What a request cut at the end of the drain gets (in-band, or as the 503's body)."""


def send_shed(
    resp: Responder, cls: str, reason: Reason, retry_s: float | None, rid: str,
    extra: tuple[Header, ...] = (),
) -> int:  # fmt: skip
    """429 with Retry-After (wall seconds) for a request the core shed (503 for
    `shutdown`: this replica stops, another serves it); returns the Retry-After sent, in
    seconds."""
    header = retry_after_header(retry_s)
    msg = SHED_MESSAGES[reason].format(cls=cls)
    status, kind = (503, "service_unavailable") if reason == Reason.SHUTDOWN else (
        429, "rate_limit_exceeded")  # fmt: skip
    send_error(resp, status, f"{msg}; retry after {header} s", kind, reason,
               (("retry-after", header), ("x-request-id", rid), *extra))  # fmt: skip
    return int(header)


SDK_MAX_RETRY_AFTER_S = 120.0
"""The official `openai` SDK honours a Retry-After up to this (MAX_RETRY_AFTER_DELAY) and
does not retry at all past it; a quota that refills later says `x-should-retry: false`."""


def reset_text(seconds: float) -> str:
    """A bucket's time to full as OpenAI writes x-ratelimit-reset-*: `20ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s"


def ratelimit_headers(verdict: Verdict | None, speedup: float) -> tuple[Header, ...]:
    """OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the buckets of a
    request's quota (none without one): the bucket's size, what it holds after this
    request, and the wall time until it is full again."""
    if verdict is None:
        return ()
    out: list[Header] = []
    for kind, lim in verdict.limits.items():
        out += [
            (f"x-ratelimit-limit-{kind}", str(math.floor(lim.limit))),
            (f"x-ratelimit-remaining-{kind}", str(int(lim.remaining))),
            (f"x-ratelimit-reset-{kind}", reset_text(lim.reset_s / speedup)),
        ]
    return tuple(out)


def send_quota(resp: Responder, tenant: str, verdict: Verdict, speedup: float, rid: str) -> float:
    """429 for a request over its quota, in OpenAI's shape (`type`: the bucket kind that
    refused it, `code`: quota_exceeded): `retry-after-ms` exact to the bucket's refill
    (rounded up to the millisecond), `Retry-After` in whole seconds rounded up, so neither
    is earlier than the request can be admitted. Past the SDK's 120 s cap (or never: the
    request costs more than the burst) `x-should-retry: false`, so SDK clients stop
    instead of hammering. Returns the wait told, in wall seconds (inf: never)."""
    wait = verdict.wait_s / speedup
    kind = verdict.refused_by or "tokens"
    headers: list[Header] = [("x-request-id", rid), *ratelimit_headers(verdict, speedup)]
    if math.isfinite(wait):
        ms = max(1, math.ceil(wait * 1000))
        headers += [("retry-after", str(max(1, math.ceil(ms / 1000)))), ("retry-after-ms", str(ms))]
        msg = f"tenant {tenant[:64]!r} is over its {kind} quota; retry after {ms / 1000:g} s"
    else:
        msg = f"this request costs more {kind} than tenant {tenant[:64]!r}'s quota allows at once"
    if not math.isfinite(wait) or wait > SDK_MAX_RETRY_AFTER_S:
        headers.append(("x-should-retry", "false"))
    send_error(resp, 429, msg, kind, Reason.QUOTA, tuple(headers))
    return wait


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


def failure_of(exc: UpstreamError, backend: str = "backend") -> Failure:
    """The failure kind of a failure to talk to `backend` (its name: refused, timed out,
    reset). The log line names the backend and the failure, not its address (the
    exception's text holds it); the client is told neither."""
    if isinstance(exc, UpstreamTimeout):
        failure = Failure.TIMEOUT
    elif isinstance(exc, Unreachable):
        failure = Failure.REFUSED
    else:
        failure = Failure.RESET
    cause = type(exc.__cause__ or exc).__name__
    log.warning("backend %s failed: %s (%s)", backend, failure.reason, cause)
    return failure
