"""burstguard's one prompt-token counting rule, shared by the emulator, bench and workload.

Real tokenizers are model-specific and cost a download; burstguard needs a rule that is
cheap, deterministic and the same everywhere, so that a prompt the bench synthesises to
N tokens is counted as N tokens by the emulator (`burstguard.tokenizer` uses the served
model's real tokenizer instead where it is on this machine). The rule: ~4 characters per
token for everything but CJK text (the usual rate of English BPE vocabularies), and
1.7 tokens per CJK character (Han, kana, Hangul, CJK and full-width punctuation), the
rate of the reference model SmolLM2-135M's byte-level BPE on the seed's Chinese text
(docs/engine.md, "Prompt tokens", has the counts). A multilingual vocabulary such as
Qwen's spends fewer: the rule then overcounts, the pessimistic side for capacity. So a
text of `a` other characters and `h` CJK characters is `ceil(a / 4 + 1.7 h)` tokens.
A chat prompt adds a fixed overhead per message (role and delimiters, as chat templates
do) and once for the reply header; the emulator and the sim add a profile's
`model.chat_template_tokens` on top (what a real model's template inserts, measured by
`burstguard calibrate`). `filler_text(n)` is the inverse: a text of exactly
`n` tokens under this rule; the emulator's generated tokens are such 4-character pieces,
so `count_tokens(output) == completion_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

CHARS_PER_TOKEN = 4
CJK_TENTHS_PER_CHAR = 17
"""1.7 tokens per CJK character, in tenths so the count stays integer arithmetic."""
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3130-\u318f"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f"
    "\uff00-\uffef\U00020000-\U0003134f]"
)
"""Han ideographs (with extensions and compatibility forms), kana, Hangul, CJK radicals,
symbols and punctuation, full-width forms: the scripts byte-level BPE splits per byte."""
CHAT_TOKENS_PER_MESSAGE = 4
"""Role and delimiters around each chat message (as `<|im_start|>role\\n ... <|im_end|>`)."""
CHAT_REPLY_TOKENS = 3
"""The assistant header a chat template appends after the last message."""

FILLER_PIECES: tuple[str, ...] = (
    " the",
    " and",
    " for",
    " you",
    " are",
    " was",
    " not",
    " but",
    " all",
    " can",
    " her",
    " one",
    " our",
    " out",
    " day",
    " get",
    " has",
    " him",
    " his",
    " how",
    " man",
    " new",
    " now",
    " old",
    " see",
    " two",
    " way",
    " who",
    " boy",
    " did",
    " its",
    " let",
)
"""Output token texts: each exactly one token under the rule, plain ASCII, JSON-safe."""


def count_tokens(text: str) -> int:
    """Tokens in `text` under the rule: ceil(other / 4 + 1.7 CJK); the empty text is 0."""
    if text.isascii():
        return -(-len(text) // CHARS_PER_TOKEN)
    cjk = len(_CJK.findall(text))
    # exact in integers: other / 4 + 1.7 cjk == (10 other + 4 * 17 cjk) / 40
    scaled = 10 * (len(text) - cjk) + CHARS_PER_TOKEN * CJK_TENTHS_PER_CHAR * cjk
    return -(-scaled // (10 * CHARS_PER_TOKEN))


def _content_text(content: Any) -> str:
    """The text of a chat message's content: a string or OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)


TextCounter = Callable[[str], int]
"""Tokens of one text: `count_tokens` or a real tokenizer (`burstguard.tokenizer`)."""


def count_chat_tokens(
    messages: Iterable[Mapping[str, Any]], count: TextCounter = count_tokens
) -> int:
    """Prompt tokens of a chat request: contents plus per-message and reply overhead."""
    total = CHAT_REPLY_TOKENS
    for message in messages:
        total += CHAT_TOKENS_PER_MESSAGE + count(_content_text(message.get("content")))
    return total


def filler_text(n_tokens: int, start: int = 0) -> str:
    """A text that `count_tokens` counts as exactly `n_tokens` (for synthetic prompts);
    `start`: the piece to begin with (the emulator's outputs continue their prompt's)."""
    if n_tokens <= 0:
        return ""
    pieces = len(FILLER_PIECES)
    return "".join(FILLER_PIECES[(start + i) % pieces] for i in range(n_tokens))


def chat_content_for(target_prompt_tokens: int) -> str:
    """Content of a single user message whose chat prompt has `target_prompt_tokens`."""
    return filler_text(target_prompt_tokens - CHAT_TOKENS_PER_MESSAGE - CHAT_REPLY_TOKENS)
