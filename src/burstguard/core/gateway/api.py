"""The OpenAI-compatible surface the gateway accepts: parsing, errors, OpenAPI schema.

The request models are burstguard's one schema (`burstguard.wire.schema`, shared with the
emulator): the fields admission needs are validated, prompt tokens are counted by the
gateway's counter (the served model's tokenizer or burstguard's estimate,
`burstguard.tokenizer`), everything else is passed to the backend untouched, so vLLM's extra fields
(and token-id prompts) keep working. The OpenAPI document is generated from the same
models, so schemathesis fuzzes exactly what the server validates.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from pydantic.json_schema import models_json_schema

from burstguard.wire.schema import ChatCompletionRequest, CompletionRequest, GenerationRequest

__all__ = [
    "BadRequest",
    "ChatCompletionRequest",
    "CompletionRequest",
    "GenerationRequest",
    "openapi_schema",
    "parse_request",
]


def parse_request(
    model: type[GenerationRequest], body: bytes
) -> tuple[GenerationRequest, dict[str, Any]]:
    """Validates a JSON body; raises BadRequest with a message naming the bad field.
    Returns the request and the body as parsed (what goes upstream, edited: parsed once)."""
    try:  # orjson bounds nesting (1024) and numbers: a hostile body is a 400, never a 500
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    try:
        return model.model_validate(data), data
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
