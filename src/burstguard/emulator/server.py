"""The OpenAI-compatible HTTP shell around the engine driver (Starlette).

Streaming sends one SSE chunk per token as the engine produces it; a client that goes away
aborts its request so the engine frees its KV blocks. Bad input gets OpenAI-style 400/404;
a non-zero `priority` needs --scheduling-policy priority, as in vLLM. The generated text
continues its prompt's (see `_prompt`), so a request the gateway preempts and resumes with
the text so far reads exactly as if it had run alone.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from burstguard.emulator.driver import EngineDriver, RequestHandle
from burstguard.emulator.lengths import OutputLengthModel
from burstguard.emulator.metrics import EmulatorMetrics
from burstguard.emulator.protocol import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    parse_request,
)
from burstguard.engine.core import EngineCore, RequestRejected, check_priority
from burstguard.hangup import until_hangup
from burstguard.wire.prefix import block_hashes
from burstguard.wire.tokens import (
    CHAT_REPLY_TOKENS,
    FILLER_PIECES,
    TextCounter,
    count_tokens,
    filler_text,
)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _prompt(
    req: ChatCompletionRequest | CompletionRequest, chat_extra: int, count: TextCounter
) -> tuple[int, int]:
    """(the engine's prompt tokens counted by `count`, where the output text starts, by
    burstguard's rule, as the filler it continues is written). A chat request adds the
    profile's chat template tokens, and the reply header unless `add_generation_prompt` is
    off. The output is filler text that continues from the prompt's content tokens, so a
    request resumed with the text so far (completions: prompt + text; chat: a final
    assistant message with `continue_final_message`) goes on with the same text."""
    if isinstance(req, ChatCompletionRequest):
        if req.continue_final_message and req.messages[-1].role != "assistant":
            raise ApiError(400, "continue_final_message: the last message must be the "
                           "assistant's", param="continue_final_message")  # fmt: skip
        if req.continue_final_message and req.add_generation_prompt:
            raise ApiError(400, "continue_final_message and add_generation_prompt cannot "
                           "both be true", param="add_generation_prompt")  # fmt: skip
        tokens = req.prompt_tokens(count) + chat_extra
        if not req.add_generation_prompt:
            tokens -= CHAT_REPLY_TOKENS
        return tokens, sum(count_tokens(m.text) for m in req.messages)
    prompts = req.prompts()
    if len(prompts) != 1:
        raise ApiError(400, "prompt: only one prompt per request is served", param="prompt")
    only = prompts[0]
    if isinstance(only, str):
        return count(only), count_tokens(only)
    return len(only), len(only)


class EmulatorApp:
    """Routes and per-request logic; the engine itself lives in the driver."""

    def __init__(
        self,
        core: EngineCore,
        model_name: str,
        speedup: float,
        lengths: OutputLengthModel,
        count: TextCounter = count_tokens,
    ) -> None:
        """`count` counts a prompt text's tokens: the estimate, or the model's tokenizer."""
        self.core = core
        self.model_name = model_name
        self.count = count
        self.lengths = lengths
        self.metrics = EmulatorMetrics(model_name, lambda: core.stats)
        self.driver = EngineDriver(core, self.metrics, speedup=speedup)

    async def _parse(self, request: Request, kind: str) -> tuple[Any, int, int, int, int]:
        try:
            payload = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested too deep
            raise ApiError(400, "request body is not valid JSON", code="invalid_json") from None
        req = parse_request(kind, payload)  # type: ignore[arg-type]
        if req.model != self.model_name:
            raise ApiError(
                404, f"The model `{req.model}` does not exist; this server serves "
                f"`{self.model_name}`", type_="NotFoundError", code="model_not_found",
                param="model",
            )  # fmt: skip
        if req.n != 1:
            raise ApiError(400, "n: only n=1 is served", param="n")
        try:
            check_priority(self.core.config, req.priority or 0)
        except RequestRejected as exc:
            raise ApiError(400, str(exc), param="priority") from None
        prompt, start = _prompt(req, self.core.profile.chat_template_tokens, self.count)
        limit = self.core.max_model_len
        max_tokens = req.output_limit() or max(1, limit - prompt)
        if prompt + max_tokens > limit:
            raise ApiError(
                400, f"prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"maximum context length {limit}", code="context_length_exceeded",
                param="max_tokens",
            )  # fmt: skip
        output = self.lengths.output_tokens(max_tokens, req.ignore_eos)
        return req, prompt, max_tokens, output, start

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completion")

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def _generate(self, request: Request, kind: str) -> Response:
        try:
            req, prompt, max_tokens, output, start = await self._parse(request, kind)
        except ApiError as exc:
            return _error(exc)
        config = self.core.config
        hashes = (
            block_hashes(req.cache_text(), config.block_size)
            if config.enable_prefix_caching
            else ()
        )
        handle = self.driver.submit(
            prompt, max_tokens, output, priority=req.priority or 0, prefix_hashes=hashes
        )
        first = await handle.queue.get()
        if isinstance(first, RequestRejected):
            return _error(ApiError(400, str(first), code="request_rejected"))
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        if req.stream:
            return StreamingResponse(
                self._stream(kind, rid, handle, first, prompt, start, req.include_usage),
                media_type="text/event-stream",
            )
        collect = asyncio.ensure_future(_count_tokens(handle, first))
        hangup = asyncio.ensure_future(until_hangup(request.receive))
        try:
            await asyncio.wait({collect, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
            finished = collect.done()
            if not finished:  # the client left (or the server is stopping)
                collect.cancel()
                self.driver.abort(handle)
        if not finished:
            return Response(status_code=499)  # nobody reads it; nginx's "client closed"
        produced = collect.result()
        text = filler_text(produced, start)
        usage = _usage(prompt, produced)
        base = {"id": rid, "created": int(time.time()), "model": self.model_name, "usage": usage}
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": handle.finish_reason}  # fmt: skip
            return JSONResponse({**base, "object": "chat.completion", "choices": [choice]})
        choice = {"index": 0, "text": text, "finish_reason": handle.finish_reason}
        return JSONResponse({**base, "object": "text_completion", "choices": [choice]})

    async def _stream(
        self, kind: str, rid: str, handle: RequestHandle, first: Any, prompt: int, start: int,
        usage: bool,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        created = int(time.time())
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = f'{{"id":"{rid}","object":"{obj}","created":{created},"model":"{self.model_name}"'

        def chunk(piece: str | None, finish: str | None, role: bool = False) -> bytes:
            fin = "null" if finish is None else f'"{finish}"'
            if kind == "chat":
                delta: dict[str, str] = {"role": "assistant"} if role else {}
                if piece is not None:
                    delta["content"] = piece
                body = (
                    f'"choices":[{{"index":0,"delta":{json.dumps(delta)},"finish_reason":{fin}}}]'
                )
            else:
                text = json.dumps(piece or "")
                body = f'"choices":[{{"index":0,"text":{text},"finish_reason":{fin}}}]'
            return f"data: {head},{body}}}\n\n".encode()

        produced = 0
        item = first
        done = False
        try:
            if kind == "chat":
                yield chunk("", None, role=True)
            while item is not None:
                at = start + produced
                pieces = [FILLER_PIECES[(at + k) % len(FILLER_PIECES)] for k in range(item)]
                produced += item
                yield b"".join(chunk(p, None) for p in pieces)
                item = await handle.queue.get()
            done = True
            yield chunk(None, handle.finish_reason)
            if usage:
                u = json.dumps(_usage(prompt, produced))
                yield f'data: {head},"choices":[],"usage":{u}}}\n\n'.encode()
            yield b"data: [DONE]\n\n"
        finally:
            if not done:
                self.driver.abort(handle)

    async def models(self, request: Request) -> Response:
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "burstguard",
                "max_model_len": self.core.max_model_len}  # fmt: skip
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    def build(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.driver.start()
            yield
            await self.driver.stop()

        async def not_found(request: Request, exc: Exception) -> Response:
            return _error(ApiError(404, f"no route {request.url.path}", code="not_found"))

        async def bad_method(request: Request, exc: Exception) -> Response:
            return _error(ApiError(405, f"method {request.method} not allowed", code="method"))

        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.metrics_endpoint, methods=["GET"]),
            ],
            exception_handlers={404: not_found, 405: bad_method},
            lifespan=lifespan,
        )


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


async def _count_tokens(handle: RequestHandle, first: Any) -> int:
    """Waits for a non-streamed request to finish; the tokens it produced."""
    produced, item = 0, first
    while item is not None:
        produced += item
        item = await handle.queue.get()
    return produced
