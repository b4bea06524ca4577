"""The text of a workload's request as bench sends it (and as the simulator's gateway sees
it when it routes on prefixes).

A prompt is its prefix blocks rendered as text (`burstguard.wire.prefix`: the same block hash
always renders to the same text, so requests share on an engine exactly the blocks they
share in the workload), then its request id, then filler, all under burstguard's token rule
(`wire.tokens`), so the emulator counts exactly the requested tokens. Without prefix
blocks the id comes first, so no engine serves one request from another's cache. All three
are made of the filler words, each one token under the rule and under the served model's
tokenizer where burstguard has it and they are (`tokenizer.exact_pieces`: SmolLM2's are),
so a block is B tokens for the real engine too, and its blocks fall where the workload's do.
"""

from __future__ import annotations

from burstguard.wire.prefix import BLOCK_TOKENS, id_text, render_blocks
from burstguard.wire.tokens import (
    CHARS_PER_TOKEN,
    CHAT_REPLY_TOKENS,
    CHAT_TOKENS_PER_MESSAGE,
    FILLER_PIECES,
)
from burstguard.workload.spec import RequestSpec

CHAT_OVERHEAD_TOKENS = CHAT_TOKENS_PER_MESSAGE + CHAT_REPLY_TOKENS
"""What a one-message chat request adds to its content's tokens."""


def chat_content_tokens(prompt_tokens: int) -> int:
    """Tokens of the one user message that makes a chat prompt of `prompt_tokens`."""
    return max(1, prompt_tokens - CHAT_OVERHEAD_TOKENS)


class PromptRenderer:
    """Synthetic prompt texts; `prefix_block_tokens` is the size of the workload's prefix
    blocks (a Mooncake trace's hash_ids name 512-token blocks; burstguard's own, 16);
    `pieces` the one-token words the text is made of."""

    def __init__(
        self, prefix_block_tokens: int = BLOCK_TOKENS, pieces: tuple[str, ...] = FILLER_PIECES
    ) -> None:
        self.prefix_block_tokens = prefix_block_tokens
        self.pieces = pieces
        self._filler = ""

    def text(self, spec: RequestSpec, tokens: int, max_chars: int | None = None) -> str:
        """`tokens` tokens of text for `spec` (its first `max_chars` characters only)."""
        total = tokens * CHARS_PER_TOKEN
        limit = total if max_chars is None else min(total, max_chars)
        prefix = render_blocks(spec.prefix_hashes, self.prefix_block_tokens, limit, self.pieces)
        if len(prefix) >= limit:
            return prefix
        tag = id_text(spec.id, self.pieces)
        n_chars = max(0, total - len(prefix) - len(tag))
        if len(self._filler) < n_chars:
            n = max(n_chars // CHARS_PER_TOKEN * 2, 4096)
            self._filler = "".join(self.pieces[i % len(self.pieces)] for i in range(n))
        return (prefix + tag + self._filler[:n_chars])[:limit]
