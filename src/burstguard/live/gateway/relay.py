"""What the gateway does to a backend's answer on its way to the client.

- Tokens out come from `usage`: the gateway asks every backend stream for
  `stream_options.include_usage` (engines may send several tokens per SSE event, vLLM's
  `--stream-interval`, so counting events undercounts) and strips that usage chunk again
  when the client did not ask for it. A backend that sends no usage is counted one token
  per content event.
- A preemptible stream keeps the text its client has received, so that a preempted
  request can be resumed (`resume_body`): completions get the prompt plus that text,
  chat gets it as a final assistant message with `continue_final_message: true` and
  `add_generation_prompt: false` (vLLM's names), and both ask for the tokens left. The
  resumed stream's events are edited so the client sees one answer: chat's second role
  chunk is dropped and the usage, when the client asked for it, covers the whole answer.

An unedited stream (no usage to strip, no text to keep) is passed through read by read,
only counted; an edited one is cut at SSE event boundaries (a partial event waits for the
read that completes it).
"""

from __future__ import annotations

import json
import re
from typing import Any

from burstguard.sse import says_why_it_ended
from burstguard.wire.tokens import count_tokens

_SSE_TAIL = 4096
_FOLD_AT = 2 * _SSE_TAIL  # listed read bytes that make `SseRelay` join them into its tail
_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_HAS_USAGE = re.compile(rb'"usage"\s*:\s*\{')  # not `"usage": null` on every chunk
_CONTENT = re.compile(rb'"(?:content|text)"\s*:\s*"(?:[^"\\]|\\.)')  # a non-empty string


class SseRelay:
    """One streamed answer: feed each backend read, write what `feed` returns.

    `feed` runs for every read the gateway relays, so it does as little as it can: the
    stream's tail (where the usage and the finish reason are) is kept lazily, reads only
    listed until they add up to `_FOLD_AT` bytes, then joined and cut to its last
    `_SSE_TAIL` (`_fold`); an unedited stream's events are counted there too, once per
    `_FOLD_AT` bytes instead of once per read.
    """

    __slots__ = (
        "_buf", "_chat", "_edit", "_events", "_keep", "_kept", "_parts", "_scan", "_size",
        "_strip", "base_tokens", "content_seen", "resumed", "text", "text_events",
        "usage_tokens",
    )  # fmt: skip

    def __init__(self, chat: bool, strip_usage: bool, keep_text: bool) -> None:
        self._chat = chat
        self._strip = strip_usage
        self._keep = keep_text
        self._edit = strip_usage or keep_text
        self._buf = b""
        self._events = 0  # data: events of the current upstream answer (see `_fold`)
        self.text_events = 0  # events that carried text, over all answers (edited streams)
        self._parts: list[bytes] = []  # the stream's last reads, oldest first
        self._size = 0  # bytes in _parts
        self._kept = 0  # of those, the tail kept by the last fold (its events counted)
        self.text: list[str] = []
        self.usage_tokens: int | None = None
        self.base_tokens = 0  # tokens the client had when this answer was resumed
        self.resumed = False
        self.content_seen = False  # an event with content (text) went to the client
        self._scan = b""  # the end of the last output, for content split across reads

    def resume(self) -> None:
        """The answer so far is final; the next feeds are a resumed answer's."""
        self.base_tokens = self.tokens()
        self.resumed = True
        self._events = 0
        self.usage_tokens = None
        self._buf = b""
        self._parts = []
        self._size = self._kept = 0

    def feed(self, chunk: bytes) -> bytes:
        """What to write to the client for one backend read."""
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size > _FOLD_AT:
            self._fold()
        out = self._edited(chunk) if self._edit else chunk
        if out and not self.content_seen:
            seen = self._scan + out
            self.content_seen = _CONTENT.search(seen) is not None
            self._scan = seen[-64:]
        return out

    def _fold(self) -> bytes:
        """The stream's last `_SSE_TAIL` bytes, from the reads listed since the last fold.
        An unedited stream's `data:` events are counted here, each once: the count starts
        4 bytes before the end of the tail kept last time, so an event name split across
        that end is counted with the bytes that complete it, and none wholly inside it
        twice."""
        parts = self._parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if not self._edit:
            self._events += data.count(b"data:", max(0, self._kept - 4))
        tail = data[-_SSE_TAIL:]
        self._parts = [tail]
        self._size = self._kept = len(tail)
        return tail

    @property
    def tail(self) -> bytes:
        """The stream's last `_SSE_TAIL` bytes (folding what is listed since the last fold)."""
        parts = self._parts
        if not parts:
            return b""
        return parts[0] if self._size == self._kept else self._fold()

    def _edited(self, chunk: bytes) -> bytes:
        """An edited stream's read: cut at event boundaries, each event edited."""
        if not self._keep and not self._buf and chunk.endswith(b"\n\n") and b'"usage"' not in chunk:
            self._events += chunk.count(b"data:")  # whole events, none to strip: as they came
            return chunk
        data = self._buf + chunk
        end = data.rfind(b"\n\n")
        if end < 0:  # no event complete yet
            self._buf = data
            return b""
        cut = end + 2
        self._buf = data[cut:]
        out: list[bytes] = []
        for event in data[:cut].split(b"\n\n"):
            if event and (kept := self._edit_event(event)) is not None:
                out.append(kept + b"\n\n")
        return b"".join(out)

    def _edit_event(self, event: bytes) -> bytes | None:
        """Learns from one SSE event; the event to write (edited), or None to drop it."""
        if not event.startswith(b"data:"):
            return event
        self._events += 1
        payload = event[5:].strip()
        if payload == b"[DONE]" or not (self._keep or _HAS_USAGE.search(payload)):
            return event  # the common case: no JSON parsed
        try:
            data = json.loads(payload)
        except ValueError:
            return event
        if not isinstance(data, dict):
            return event
        usage = data.get("usage")
        choices = data.get("choices")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
            if not choices:  # the usage chunk
                if self._strip:
                    return None
                if self.resumed:  # the client's usage covers its whole answer
                    base = self.base_tokens
                    usage["completion_tokens"] += base
                    usage["prompt_tokens"] = max(0, usage.get("prompt_tokens", 0) - base)
                    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                    return b"data: " + json.dumps(data, separators=(",", ":")).encode()
                return event
        if not self._keep or not isinstance(choices, list) or not choices:
            return event
        choice = choices[0] if isinstance(choices[0], dict) else {}
        delta = choice.get("delta") if self._chat else None
        piece = (delta or {}).get("content") if self._chat else choice.get("text")
        if isinstance(piece, str) and piece:
            self.text.append(piece)
            self.text_events += 1
            return event
        if self.resumed and self._chat and isinstance(delta, dict) and "role" in delta:
            # the resumed answer's own role chunk: the client has one already
            return event if choice.get("finish_reason") is not None else None
        return event

    def flush(self) -> bytes:
        """What an edited stream still holds at its end (an event the backend never closed
        with a blank line): passed on as it came."""
        rest, self._buf = self._buf, b""
        return rest

    def finished(self) -> bool:
        """The stream said why it ended (its last choice chunk carries a finish_reason)."""
        return says_why_it_ended(self.tail)

    def tokens(self) -> int:
        """Tokens the client received: the backend's usage (plus what an earlier answer
        gave), else one per content event."""
        tail = self.tail  # (an unedited stream's events are counted up to date by this)
        if self.usage_tokens is not None:
            return self.base_tokens + self.usage_tokens
        if not self._edit:
            found = _USAGE.findall(tail)
            if found:
                return self.base_tokens + int(found[-1])
            n = self._events
            if b"[DONE]" in tail:
                n -= 1
            n -= 1 + (1 if self._chat else 0)  # finish chunk, role chunk
            return self.base_tokens + max(0, n)
        if self._keep:
            return self.text_events
        n = self._events - (1 if b"[DONE]" in tail else 0) - 1 - (1 if self._chat else 0)
        return self.base_tokens + max(0, n)

    def received(self) -> int:
        """Tokens its client holds now, whether the stream ended or was cut: the usage
        when the answer is whole, else one per content event (exact with vLLM's default
        `--stream-interval 1` and the emulator; a backend that sends several tokens per
        event is undercounted for a cut stream)."""
        if self.usage_tokens is not None or self.finished():
            return self.tokens()
        if self._keep:
            return self.text_events
        self.tail  # noqa: B018  (folds: an unedited stream's events are counted to date)
        return self.base_tokens + max(0, self._events - (1 if self._chat else 0))


def json_tokens(body: bytes) -> int | None:
    """completion_tokens of a non-streamed answer, or the answer text counted; None when
    the body is not a JSON object (no OpenAI answer: a broken or wrong backend)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        usage = data.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
        text = ""
        for choice in data.get("choices") or []:
            msg = choice.get("message") or {}
            text += choice.get("text") or msg.get("content") or ""
        return count_tokens(text) if text else 0
    except (AttributeError, TypeError):
        return 0


def upstream_body(data: dict[str, Any], stream: bool, priority: int | None) -> dict[str, Any]:
    """The body sent upstream: the client's, with usage asked for on a stream and vLLM's
    `priority` set (or removed: vLLM refuses it without its priority policy)."""
    out = dict(data)
    out.pop("priority", None)
    if priority is not None:
        out["priority"] = priority
    if stream:
        opts = dict(out.get("stream_options") or {})
        opts["include_usage"] = True
        out["stream_options"] = opts
    return out


def resume_body(data: dict[str, Any], chat: bool, text: str, received: int) -> dict[str, Any]:
    """The upstream body that continues `data`'s answer after `text` (`received` tokens)."""
    out = dict(data)
    if chat:
        out["messages"] = [*data["messages"], {"role": "assistant", "content": text}]
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    else:
        prompt = data["prompt"]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):  # the core never preempts these (not `resumable`)
            raise ValueError("only a single text prompt can be resumed with text")
        out["prompt"] = prompt + text
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(data.get(key), int):
            out[key] = max(1, data[key] - received)
    return out
