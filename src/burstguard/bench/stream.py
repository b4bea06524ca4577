"""One HTTP attempt against an OpenAI-compatible server, timed token by token.

TTFT is the time to the first chunk carrying content (a role-only or empty chunk does not
count); ITLs are the gaps between later content chunks; usage comes from the server when it
sends it (`stream_options.include_usage`), else the content chunks are counted. Failures are
classified into the record's error kinds instead of raised.

The HTTP client is the gateway's (`burstguard.http.client.UpstreamPool`: keep-alive
connections, httptools parsing): each socket read's body bytes are parsed for SSE events in
the same call that read them, with no stream reader and no task wake-up per token: CPU per
request is what bounds the open-loop rate one process sustains, and this path costs less of
it than a general-purpose client (the A/B against aiohttp: docs/bench.md, "The client's own
limits").
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from burstguard.client.retry import parse_retry_after
from burstguard.http.client import (
    Broken,
    Unreachable,
    UpstreamError,
    UpstreamPool,
    UpstreamTimeout,
)
from burstguard.sse import says_why_it_ended

_ERROR_BODY_LIMIT = 2048


@dataclass(slots=True)
class Attempt:
    """The outcome of one try; times in wall seconds from `started`."""

    started: float
    status: int | None = None
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retry_after_s: float | None = None
    detail: str | None = None
    error_code: str | None = None  # an error answer's OpenAI `error.code`

    @property
    def ok(self) -> bool:
        return self.error is None


# A content chunk has a non-empty `delta.content` (chat) or `text` (completions) string.
# Matching the bytes avoids a JSON parse per token; only events that carry usage or an
# error are parsed.
_CONTENT = re.compile(rb'"(?:content|text)"\s*:\s*"(?!")')
_PARSE_EVENT = re.compile(rb'^data:[ \t]*(.*(?:"usage"\s*:\s*\{|"error"\s*:).*?)[ \t\r]*$', re.M)
_DONE = re.compile(rb"^data:\s*\[DONE\]\s*$", re.M)


def _usage(attempt: Attempt, payload: dict[str, Any]) -> None:
    usage = payload.get("usage")
    if isinstance(usage, dict):
        attempt.prompt_tokens = usage.get("prompt_tokens", attempt.prompt_tokens)
        attempt.completion_tokens = usage.get("completion_tokens", attempt.completion_tokens)


class SseReader:
    """Feeds on an SSE body as it arrives (`feed`, one call per socket read) and times it
    into an Attempt; `close` says whether it ended properly.

    A read's complete lines are matched as one block (a few regex scans per read, not per
    line): the content events in one read arrived together, so the first gets the read's
    time and the rest a gap of 0, as a per-line loop would give them. Only events that
    carry usage or an error are picked out and parsed as JSON."""

    __slots__ = ("attempt", "buffer", "done", "failed", "finished", "last", "tokens")

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self.last: float | None = None
        self.tokens = 0
        self.buffer = b""
        self.done = self.finished = self.failed = False

    def feed(self, data: bytes) -> None:
        if self.failed:
            return
        now = time.monotonic()
        block, newline, rest = (self.buffer + data).rpartition(b"\n")
        self.buffer = rest
        if not newline:
            return
        attempt = self.attempt
        n = len(_CONTENT.findall(block))
        if n:
            if self.last is None:
                attempt.ttft_s = now - attempt.started
            else:
                attempt.itl_s.append(now - self.last)
            if n > 1:
                attempt.itl_s.extend([0.0] * (n - 1))
            self.tokens += n
            self.last = now
        self.done = self.done or _DONE.search(block) is not None
        self.finished = self.finished or says_why_it_ended(block)
        for event in _PARSE_EVENT.findall(block):
            self._parse(event)
            if self.failed:
                return

    def _parse(self, body: bytes) -> None:
        attempt = self.attempt
        try:
            event = json.loads(body)
        except ValueError:
            attempt.error, attempt.detail = "stream_broken", "unparseable SSE event"
            self.failed = True
            return
        if isinstance(event, dict) and "error" in event and not event.get("choices"):
            err = event["error"]
            attempt.error, attempt.detail = "stream_broken", str(err)[:200]
            code = err.get("code") if isinstance(err, dict) else None
            attempt.error_code = code if isinstance(code, str) else None  # e.g. preempted
            self.failed = True
        elif isinstance(event, dict):
            _usage(attempt, event)

    def close(self) -> None:
        attempt = self.attempt
        attempt.e2e_s = time.monotonic() - attempt.started
        if attempt.completion_tokens is None:  # (a broken stream's: what it received)
            attempt.completion_tokens = self.tokens
        if self.failed:
            return
        if not self.done:
            attempt.error, attempt.detail = "stream_broken", "stream ended without [DONE]"
        elif not self.finished:
            attempt.error = "stream_broken"
            attempt.detail = "stream ended without a finish_reason"


def new_client(base_url: str, timeout_s: float | None) -> UpstreamPool:
    """The keep-alive client for one target (inside a running event loop)."""
    silence = timeout_s if timeout_s is not None else 24 * 3600.0
    return UpstreamPool(base_url, connect_timeout_s=min(silence, 10.0), read_timeout_s=silence)


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, UpstreamTimeout | TimeoutError):
        return "timeout"
    if isinstance(exc, Unreachable):
        refused = isinstance(exc.__cause__, ConnectionRefusedError)
        return "connection_refused" if refused else "connection_error"
    return "stream_broken" if isinstance(exc, Broken | ValueError) else "connection_error"


def error_code(body: bytes) -> str | None:
    """`error.code` of an OpenAI-shaped error body (None for any other body)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    err = data.get("error") if isinstance(data, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else None


async def send(
    client: UpstreamPool,
    path: str,
    data: bytes,
    headers: dict[str, str],
    *,
    stream: bool,
    timeout_s: float | None,
) -> Attempt:
    """Sends one request and measures it; never raises for HTTP or transport failures."""
    attempt = Attempt(started=time.monotonic())
    call = None
    try:
        async with asyncio.timeout(timeout_s):
            call = await client.start("POST", path, data, headers)
            attempt.status = status = await call.response()
            if status != 200:
                attempt.error = f"http_{status}"
                attempt.retry_after_s = parse_retry_after(call.retry_after)
                body = await call.read()
                attempt.detail = body[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
                attempt.error_code = error_code(body)
                attempt.e2e_s = time.monotonic() - attempt.started
                return attempt
            if stream:
                reader = SseReader(attempt)
                call.stream_to(reader.feed)
                await call.finished()
                reader.close()
            else:
                payload = json.loads(await call.read())
                attempt.ttft_s = attempt.e2e_s = time.monotonic() - attempt.started
                if isinstance(payload, dict):
                    _usage(attempt, payload)
    except (UpstreamError, TimeoutError, ValueError) as exc:
        if call is not None:
            call.abort()  # the engine learns the client left and frees the request
        attempt.error = _error_kind(exc)
        attempt.detail = f"{type(exc).__name__}: {exc}"[:200]
        attempt.e2e_s = time.monotonic() - attempt.started
    except BaseException:
        if call is not None:
            call.abort()
        raise
    return attempt
