"""The relay's edits of a backend stream: tokens from usage, the usage chunk stripped when
the client did not ask for it, and a resumed answer read as one."""

from __future__ import annotations

import json

from burstguard.live.gateway.relay import SseRelay, resume_body, upstream_body


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text: str | None = None, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
    if text is not None:
        delta["content"] = text
    return event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = event({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 6,
                                        "total_tokens": 16}})  # fmt: skip
DONE = b"data: [DONE]\n\n"


def test_tokens_come_from_usage_when_events_carry_several_each() -> None:
    """vLLM --stream-interval 3: two events, six tokens; one token per event would say 2."""
    relay = SseRelay(chat=True, strip_usage=True, keep_text=False)
    stream = chunk(role=True) + chunk("a b c") + chunk("d e f") + chunk(finish="length")
    out = relay.feed(stream + USAGE + DONE)
    assert relay.tokens() == 6 and relay.finished()
    assert b'"usage"' not in out and out.endswith(DONE)  # the client did not ask for it
    kept = SseRelay(chat=True, strip_usage=False, keep_text=False)
    assert kept.feed(stream + USAGE + DONE) == stream + USAGE + DONE
    assert kept.tokens() == 6


def test_a_partial_event_waits_for_the_read_that_completes_it() -> None:
    relay = SseRelay(chat=False, strip_usage=True, keep_text=True)
    whole = event({"choices": [{"index": 0, "text": " hello", "finish_reason": None}]})
    assert relay.feed(whole[:10]) == b""
    assert relay.feed(whole[10:]) == whole
    assert relay.text == [" hello"]


def test_a_resumed_chat_answer_reads_as_one() -> None:
    relay = SseRelay(chat=True, strip_usage=False, keep_text=True)
    first = chunk(role=True) + chunk("one") + chunk(" two")
    assert relay.feed(first) == first
    relay.resume()  # preempted after 2 tokens
    assert relay.base_tokens == 2
    body = resume_body({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6},
                       True, "".join(relay.text), relay.base_tokens)  # fmt: skip
    assert body["messages"][-1] == {"role": "assistant", "content": "one two"}
    assert body["continue_final_message"] and body["add_generation_prompt"] is False
    assert body["max_tokens"] == 4
    usage = event({"choices": [], "usage": {"prompt_tokens": 14, "completion_tokens": 4,
                                            "total_tokens": 18}})  # fmt: skip
    out = relay.feed(chunk(role=True) + chunk(" three") + chunk(finish="length") + usage + DONE)
    assert b"role" not in out  # the client has its role chunk already
    got = json.loads(out.split(b"\n\n")[2][6:])
    assert got["usage"] == {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}
    assert relay.tokens() == 6


def test_upstream_body_asks_for_usage_and_sets_or_drops_priority() -> None:
    data = {"model": "m", "prompt": "x", "stream": True, "priority": 5}
    want = {"model": "m", "prompt": "x", "stream": True, "stream_options": {"include_usage": True}}
    assert upstream_body(data, True, None) == want
    assert upstream_body(data, False, 1)["priority"] == 1
    assert resume_body({"prompt": "abc", "max_tokens": 9}, False, "def", 3) == {
        "prompt": "abcdef", "max_tokens": 6}  # fmt: skip


def completion(text: str | None = None, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "text": text or "", "finish_reason": finish}]})


def test_an_unedited_stream_without_usage_counts_its_events_over_any_reads() -> None:
    """A backend that sends no usage: one token per content event, however the reads cut
    the stream (`data:` split across reads, streams longer than the tail the relay keeps),
    and the stream goes to the client byte for byte."""
    tokens = 300  # ~17 KB: several folds of the tail
    stream = b"".join(completion(" tok") for _ in range(tokens)) + completion(finish="length")
    stream += DONE
    for size in (1, 3, 4, 5, 7, 64, 185, 4096, len(stream)):
        relay = SseRelay(chat=False, strip_usage=False, keep_text=False)
        out = b"".join(relay.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        assert out == stream
        assert relay.tokens() == tokens, size
        assert relay.finished()


def test_usage_at_the_end_of_a_long_stream_is_found() -> None:
    relay = SseRelay(chat=False, strip_usage=False, keep_text=False)
    for _ in range(200):
        relay.feed(completion(" tok"))
    usage = event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 500,
                                            "total_tokens": 503}})  # fmt: skip
    relay.feed(completion(finish="length") + usage)
    relay.feed(DONE)
    assert relay.tokens() == 500 and relay.finished()
