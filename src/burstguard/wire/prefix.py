"""Prompt prefix blocks as a prefix cache sees them: chained hashes of a prompt's full
blocks, and the text a workload's block hashes stand for.

Two requests share cached KV on an engine for exactly the leading full blocks their prompts
share. Three parts key on that: the gateway's prefix affinity (which replica holds a
prefix), the emulator's prefix cache, and bench's prompts (a workload's shared blocks are
sent as shared text, so an engine sees the reuse the workload describes). Blocks are
counted with burstguard's token rule (`wire.tokens`: 4 characters a token), so for the
ASCII text bench renders block i is exactly characters [4 B i, 4 B (i + 1)) at B-token
blocks. Hashes are blake2b and SHAKE, not Python's salted `hash`: every process agrees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import lru_cache

from burstguard.wire.tokens import CHARS_PER_TOKEN, FILLER_PIECES

BLOCK_TOKENS = 16
"""vLLM's default `--block-size`: the unit of its prefix cache."""


def h64(data: bytes) -> int:
    """A 64-bit hash that is the same in every process."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def block_hashes(
    text: str, block_tokens: int = BLOCK_TOKENS, max_blocks: int | None = None
) -> tuple[int, ...]:
    """Chained hashes of the full `block_tokens`-token blocks of `text` (at most
    `max_blocks`): block i's hash covers blocks 0..i, as vLLM chains its block hashes, so
    equal hashes mean equal leading text."""
    width = block_tokens * CHARS_PER_TOKEN
    n = len(text) // width
    if max_blocks is not None:
        n = min(n, max_blocks)
    out: list[int] = []
    parent = 0
    for i in range(n):
        parent = h64(parent.to_bytes(8, "big") + text[i * width : (i + 1) * width].encode())
        out.append(parent)
    return tuple(out)


def chat_text(messages: Iterable[tuple[str, str]]) -> str:
    """A chat prompt as prefix hashing reads it: each (role, text) message's text, then its
    role. The first message's text starts at character 0, so its blocks are the blocks of
    the text bench rendered; a different role still changes every later block."""
    return "".join(f"{text}\n<|{role}|>\n" for role, text in messages)


@lru_cache(maxsize=8192)
def block_text(block_hash: int, tokens: int, pieces: tuple[str, ...] = FILLER_PIECES) -> str:
    """The text a workload's block hash stands for: `tokens` filler tokens drawn from the
    hash, so equal hashes give equal text and different ones differ (2^-5 per token).
    `pieces`: 4-character words that are one token each (`tokenizer.exact_pieces`)."""
    draw = hashlib.shake_256(str(block_hash).encode()).digest(tokens)
    return "".join(pieces[b % len(pieces)] for b in draw)


def render_blocks(
    hashes: Sequence[int],
    block_tokens: int,
    max_chars: int | None = None,
    pieces: tuple[str, ...] = FILLER_PIECES,
) -> str:
    """The text of a run of workload blocks (`block_tokens` tokens each), cut at
    `max_chars` characters; only the blocks needed are rendered."""
    width = block_tokens * CHARS_PER_TOKEN
    if max_chars is not None:
        hashes = hashes[: -(-max_chars // width)]
    text = "".join(block_text(h, block_tokens, pieces) for h in hashes)
    return text if max_chars is None else text[:max_chars]


ID_TOKENS = 13
"""Tokens of a request's id tag: 13 base-32 digits hold its 64-bit hash."""


def id_text(request_id: str, pieces: tuple[str, ...] = FILLER_PIECES) -> str:
    """A request's id as `ID_TOKENS` filler words (its hash in base len(pieces)): unique
    text, so no engine serves it from another request's cache, and as many tokens under a
    model's tokenizer as under the estimate (`[r12]` is 2 estimated tokens, 5 real)."""
    value, n = h64(request_id.encode()), len(pieces)
    out = []
    for _ in range(ID_TOKENS):
        value, digit = divmod(value, n)
        out.append(pieces[digit])
    return "".join(out)
