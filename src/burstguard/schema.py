"""The OpenAI request schema, once: what the emulator serves and what the gateway admits.

OpenAI's fields plus vLLM's extensions (`ignore_eos`, `priority`, token-id prompts,
`continue_final_message`, `add_generation_prompt`). Unknown fields are kept, so a server
passes vLLM's other extras on untouched; the OpenAPI schema (generated from these models)
still lists the known ones. Prompt tokens are counted with burstguard's one token rule
(`burstguard.wire.tokens`); a token-id prompt is its length, as vLLM counts it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from burstguard.wire.prefix import chat_text
from burstguard.wire.tokens import TextCounter, count_chat_tokens, count_tokens

TokenId = Annotated[int, Field(ge=0)]  # a negative token id is no token (vLLM refuses it)

MAX_TOKENS_LIMIT = 1 << 20


class _Loose(BaseModel):
    """Unknown fields are kept (and forwarded); the schema still lists the known ones."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})


class ContentPart(_Loose):
    type: str = Field(min_length=1)
    text: str | None = None


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    @property
    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(p.text or "" for p in self.content)


class StreamOptions(_Loose):
    include_usage: bool | None = None


class _Generation(_Loose):
    model: str = Field(min_length=1, max_length=256)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    user: str | None = Field(None, max_length=256)
    ignore_eos: bool = Field(False, description="vLLM: generate exactly max_tokens")
    priority: int | None = Field(
        None, ge=-(1 << 31), le=(1 << 31) - 1,
        description="vLLM: lower runs first (--scheduling-policy priority)",
    )  # fmt: skip

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options is not None and self.stream_options.include_usage)


class ChatCompletionRequest(_Generation):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    continue_final_message: bool = Field(
        False, description="vLLM: continue the last (assistant) message instead of a new one"
    )
    add_generation_prompt: bool = Field(True, description="vLLM: append the reply header")

    def output_limit(self) -> int | None:
        """OpenAI's newer `max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens

    def prompt_tokens(self, count: TextCounter = count_tokens) -> int:
        """Prompt tokens with `count` for texts (the model's tokenizer, or the estimate)."""
        return count_chat_tokens(({"content": m.text} for m in self.messages), count)

    def cache_text(self) -> str:
        """The prompt as prefix hashing reads it (`prefix.chat_text`)."""
        return chat_text((m.role, m.text) for m in self.messages)


class CompletionRequest(_Generation):
    """POST /v1/completions: a text, texts, token ids or lists of token ids."""

    prompt: str | list[str] | list[TokenId] | list[list[TokenId]] = Field(min_length=1)

    def output_limit(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a text or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]

    def prompt_tokens(self, count: TextCounter = count_tokens) -> int:
        """Prompt tokens with `count` for texts; token ids count as themselves."""
        return max(1, sum(count(p) if isinstance(p, str) else len(p) for p in self.prompts()))

    def cache_text(self) -> str:
        """The prompt as prefix hashing reads it: a single text prompt; "" for token ids or
        several prompts (no prefix blocks)."""
        prompts = self.prompts()
        return prompts[0] if len(prompts) == 1 and isinstance(prompts[0], str) else ""


GenerationRequest = ChatCompletionRequest | CompletionRequest
