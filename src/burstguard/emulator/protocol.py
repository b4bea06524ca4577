"""OpenAI request models and error bodies the emulator accepts and returns.

Requests are validated once with pydantic; fields the emulator does not model (temperature,
top_p, ...) are accepted and ignored, as a real server would not fail on them. Errors use
OpenAI's shape `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class _GenerationRequest(BaseModel):
    """Fields shared by chat and text completions (OpenAI's plus vLLM's extensions)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="only n=1 is served")
    ignore_eos: bool = Field(default=False, description="vLLM: generate exactly max_tokens")
    priority: int = Field(default=0, description="vLLM: lower runs first (priority policy)")

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @property
    def requested_max_tokens(self) -> int | None:
        """OpenAI's newer `max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class ApiError(Exception):
    """An error answered to the client with OpenAI's error body; never a traceback."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


ErrorKind = Literal["chat", "completion"]


def parse_request(kind: ErrorKind, payload: Any) -> ChatCompletionRequest | CompletionRequest:
    """Validates a decoded JSON body; raises ApiError(400) naming the first bad field."""
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    if not isinstance(payload, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_body")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, f"{field}: {first['msg']}", code="invalid_value", param=field) from None
