"""The OpenAI-compatible surface the gateway accepts: request models, errors, OpenAPI schema.

Only the fields admission needs are validated (model, messages/prompt, max_tokens, stream);
prompt tokens are counted with burstguard's one token rule (burstguard.emulator.tokens);
everything else is passed to the backend untouched, so vLLM's extra fields keep working.
The OpenAPI document is generated from the same models, so schemathesis fuzzes exactly what
the server validates.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema

from burstguard.emulator.tokens import count_chat_tokens, count_tokens

_MAX_TOKENS_LIMIT = 1 << 20


class _Loose(BaseModel):
    """Unknown fields are kept (and forwarded); the schema still lists the known ones."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})


class ContentPart(_Loose):
    type: str = Field(min_length=1)
    text: str | None = None


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class StreamOptions(_Loose):
    include_usage: bool | None = None


class _Generation(_Loose):
    model: str = Field(min_length=1, max_length=256)
    max_tokens: int | None = Field(None, ge=1, le=_MAX_TOKENS_LIMIT)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    user: str | None = Field(None, max_length=256)
    priority: int | None = Field(None, ge=-(1 << 31), le=(1 << 31) - 1)


class ChatCompletionRequest(_Generation):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=_MAX_TOKENS_LIMIT)

    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def prompt_tokens(self) -> int:
        return count_chat_tokens({"content": _text(m.content)} for m in self.messages)


class CompletionRequest(_Generation):
    """POST /v1/completions."""

    prompt: str | list[str] = Field(min_length=1)

    def output_limit(self) -> int | None:
        return self.max_tokens

    def prompt_tokens(self) -> int:
        texts = [self.prompt] if isinstance(self.prompt, str) else self.prompt
        return max(1, sum(count_tokens(t) for t in texts))


GenerationRequest = ChatCompletionRequest | CompletionRequest


def _text(content: str | list[ContentPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.text or "" for p in content)


def parse_request(model: type[GenerationRequest], body: bytes) -> GenerationRequest:
    """Validates a JSON body; raises BadRequest with a message naming the bad field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(describe_validation(exc)) from exc


class BadRequest(Exception):
    """Malformed JSON or an invalid field (answered with 400)."""


def describe_validation(exc: ValidationError) -> str:
    """`field.path: message` for the first few errors."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _generation_op(summary: str, schema_name: str) -> dict[str, Any]:
    return {
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}
            },
        },
        "responses": {
            "200": {
                "description": "the backend's answer, or its SSE stream when stream=true",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            "400": _error("malformed JSON or an invalid field"),
            "401": _error("API keys are configured and none or a wrong one was sent"),
            "413": _error("body larger than max_body_bytes"),
            "429": {
                **_error("shed: the request cannot start before its class deadline"),
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            },
            "502": _error("the backend failed or answered with a server error"),
            "503": _error("no backend reachable"),
            "504": _error("the backend did not answer in time"),
        },
    }


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI 3.1 document served at /openapi.json."""
    _, defs = models_json_schema(
        [(ChatCompletionRequest, "validation"), (CompletionRequest, "validation")],
        ref_template="#/components/schemas/{model}",
    )
    schemas = {**defs["$defs"], "Error": _ERROR_SCHEMA}
    text = {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}
    ok_json = {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "burstguard gateway", "version": "1"},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": {
            "/v1/chat/completions": {
                "post": _generation_op("chat completion", "ChatCompletionRequest")
            },
            "/v1/completions": {"post": _generation_op("text completion", "CompletionRequest")},
            "/v1/models": {
                "get": {
                    "summary": "the backends' models",
                    "responses": {
                        "200": ok_json,
                        "401": _error("bad key"),
                        "503": _error("no backend"),
                    },
                }
            },
            "/health": {"get": {"summary": "the process is up", "responses": {"200": ok_json}}},
            "/ready": {
                "get": {
                    "summary": "a backend is reachable",
                    "responses": {"200": ok_json, "503": _error("no backend reachable")},
                }
            },
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": text}}},
        },
    }
