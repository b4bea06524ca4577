"""Parsing and error bodies of the emulator's OpenAI surface.

Requests are validated once with burstguard's one schema (`burstguard.wire.schema`, shared
with the gateway); fields the emulator does not model (temperature, top_p, ...) are
accepted and ignored, as a real server would not fail on them. Errors use OpenAI's shape
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from burstguard.wire.schema import ChatCompletionRequest, CompletionRequest


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
