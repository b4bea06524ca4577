"""Request bodies for a workload: deterministic prompts of the requested token length.

Prompts are `workload.prompts`: a request's prefix blocks as shared text, its request id,
then filler (4 characters per token), so the emulator counts exactly the requested prompt
tokens and an engine's prefix cache serves exactly the blocks requests share in the
workload. A prompt file replaces them (its lines or JSONL `prompt` fields, used in turn).
Labels travel as headers the gateway reads (`x-burstguard-class`, `x-burstguard-tenant`),
the tenant also as the fairness id and the run's SLO as the objectives that Endpoint
Pickers read (`wire.headers`: `x-llm-d-inference-fairness-id`, `x-slo-ttft-ms`,
`x-slo-tpot-ms`),
and, with `send_priority`, as vLLM's `priority` field (interactive 0, standard 1, batch 2) —
off by default because vLLM rejects a non-zero priority unless it runs
`--scheduling-policy priority`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from burstguard.errors import FileError
from burstguard.wire import headers as wire_headers
from burstguard.wire.prefix import BLOCK_TOKENS
from burstguard.wire.tokens import FILLER_PIECES
from burstguard.workload.prompts import PromptRenderer, chat_content_tokens
from burstguard.workload.spec import RequestSpec, priority_of

Api = Literal["chat", "completions"]
CLASS_HEADER = wire_headers.CLASS
TENANT_HEADER = wire_headers.TENANT
API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def load_prompt_file(path: Path) -> list[str]:
    """Prompts from a text file (one per line) or JSONL with a `prompt` (or `text`) field."""
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError as exc:
        raise FileError(f"--prompt-file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise FileError(f"--prompt-file {path}: not UTF-8 text") from None
    prompts: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FileError(f"{path}:{lineno}: bad JSON: {exc.msg}") from None
            text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                raise FileError(f"{path}:{lineno}: expected a string `prompt` field")
            prompts.append(text)
        else:
            prompts.append(line)
    if not prompts:
        raise FileError(f"--prompt-file {path}: no prompts in it")
    return prompts


@dataclass
class PayloadBuilder:
    """Turns a RequestSpec into (path, JSON body bytes, headers) for one API."""

    model: str
    api: Api = "chat"
    stream: bool = True
    ignore_eos: bool = True
    send_priority: bool = False
    prompts: list[str] | None = None
    prefix_block_tokens: int = BLOCK_TOKENS
    slo_ms: tuple[float, float] | None = None  # (TTFT, TPOT) sent as x-slo-*-ms headers
    pieces: tuple[str, ...] = FILLER_PIECES  # one-token words (`tokenizer.exact_pieces`)
    api_key: str | None = None  # sent as `Authorization: Bearer`
    _renderer: PromptRenderer | None = None

    def _text(self, spec: RequestSpec, index: int, tokens: int) -> str:
        if self.prompts:
            return self.prompts[index % len(self.prompts)]
        if self._renderer is None:
            self._renderer = PromptRenderer(self.prefix_block_tokens, self.pieces)
        return self._renderer.text(spec, tokens)

    def body(self, spec: RequestSpec, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max(1, spec.max_tokens)}
        if self.api == "chat":
            text = self._text(spec, index, chat_content_tokens(spec.prompt_tokens))
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = self._text(spec, index, max(1, spec.prompt_tokens))
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.send_priority and spec.priority_class is not None:
            body["priority"] = priority_of(spec.priority_class)
        return body

    def encode(self, spec: RequestSpec, index: int) -> tuple[str, bytes, dict[str, str]]:
        headers = {"Content-Type": "application/json", **wire_headers.bearer(self.api_key)}
        if spec.priority_class is not None:
            headers[CLASS_HEADER] = str(spec.priority_class)
        if spec.tenant is not None:
            headers[TENANT_HEADER] = headers[wire_headers.FAIRNESS_ID] = str(spec.tenant)
        if self.slo_ms is not None:
            headers[wire_headers.SLO_TTFT_MS] = f"{self.slo_ms[0]:g}"
            headers[wire_headers.SLO_TPOT_MS] = f"{self.slo_ms[1]:g}"
        data = json.dumps(self.body(spec, index), separators=(",", ":")).encode()
        return API_PATHS[self.api], data, headers
