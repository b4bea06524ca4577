"""One HTTP attempt against an OpenAI-compatible server, timed token by token.

TTFT is the time to the first chunk carrying content (a role-only or empty chunk does not
count); ITLs are the gaps between later content chunks; usage comes from the server when it
sends it (`stream_options.include_usage`), else the content chunks are counted. Failures are
classified into the record's error kinds instead of raised.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from burstguard.client.retry import parse_retry_after
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

    @property
    def ok(self) -> bool:
        return self.error is None


# A content chunk has a non-empty `delta.content` (chat) or `text` (completions) string.
# Matching the bytes avoids a JSON parse per token; only chunks that carry usage or an
# error (or are ambiguous) are parsed.
_CONTENT = re.compile(rb'"(?:content|text)"\s*:\s*"(?!")')
_NEEDS_PARSE = re.compile(rb'"usage"\s*:\s*\{|"error"\s*:')


def _usage(attempt: Attempt, payload: dict[str, Any]) -> None:
    usage = payload.get("usage")
    if isinstance(usage, dict):
        attempt.prompt_tokens = usage.get("prompt_tokens", attempt.prompt_tokens)
        attempt.completion_tokens = usage.get("completion_tokens", attempt.completion_tokens)


def _transport_error(exc: BaseException, during_stream: bool) -> str:
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout"
    if during_stream:
        return "stream_broken"
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        return (
            "connection_refused"
            if isinstance(cause, ConnectionRefusedError)
            else ("connection_error")
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "stream_broken"
    return "connection_error"


async def _read_stream(resp: aiohttp.ClientResponse, attempt: Attempt) -> None:
    """Consumes an SSE body; marks `stream_broken` if it ends without `data: [DONE]`."""
    last: float | None = None
    tokens = 0
    buffer = b""
    done = finished = False
    async for data in resp.content.iter_any():
        now = time.monotonic()
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            body = line[5:].strip()
            if body == b"[DONE]":
                done = True
                continue
            if _CONTENT.search(body):
                tokens += 1
                if last is None:
                    attempt.ttft_s = now - attempt.started
                else:
                    attempt.itl_s.append(now - last)
                last = now
            finished = finished or says_why_it_ended(body)
            if _NEEDS_PARSE.search(body):
                try:
                    event = json.loads(body)
                except ValueError:
                    attempt.error, attempt.detail = "stream_broken", "unparseable SSE event"
                    return
                if isinstance(event, dict) and "error" in event and not event.get("choices"):
                    attempt.error, attempt.detail = "stream_broken", str(event["error"])[:200]
                    return
                if isinstance(event, dict):
                    _usage(attempt, event)
    attempt.e2e_s = time.monotonic() - attempt.started
    if attempt.completion_tokens is None:
        attempt.completion_tokens = tokens
    if not done:
        attempt.error, attempt.detail = "stream_broken", "stream ended without [DONE]"
    elif not finished:
        attempt.error, attempt.detail = "stream_broken", "stream ended without a finish_reason"


async def send(
    session: aiohttp.ClientSession,
    url: str,
    data: bytes,
    headers: dict[str, str],
    *,
    stream: bool,
    timeout_s: float | None,
) -> Attempt:
    """Sends one request and measures it; never raises for HTTP or transport failures."""
    attempt = Attempt(started=time.monotonic())
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    in_body = False
    try:
        async with session.post(url, data=data, headers=headers, timeout=timeout) as resp:
            attempt.status = resp.status
            if resp.status != 200:
                attempt.error = f"http_{resp.status}"
                attempt.retry_after_s = parse_retry_after(resp.headers.get("Retry-After"))
                attempt.detail = (await resp.content.read(_ERROR_BODY_LIMIT)).decode(
                    "utf-8", "replace"
                )
                attempt.e2e_s = time.monotonic() - attempt.started
                return attempt
            in_body = True
            if stream:
                await _read_stream(resp, attempt)
            else:
                payload = await resp.json(content_type=None)
                now = time.monotonic()
                attempt.ttft_s = attempt.e2e_s = now - attempt.started
                if isinstance(payload, dict):
                    _usage(attempt, payload)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        attempt.error = _transport_error(exc, in_body)
        attempt.detail = f"{type(exc).__name__}: {exc}"[:200]
        attempt.e2e_s = time.monotonic() - attempt.started
    return attempt
