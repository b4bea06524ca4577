"""Prompt token counts: the estimate handles CJK, and a real tokenizer is used where given."""

from __future__ import annotations

from pathlib import Path

import pytest

from burstguard.errors import BurstguardError
from burstguard.tokenizer import ESTIMATED, load_tokenizer, prompt_counter
from burstguard.wire.tokens import count_chat_tokens, count_tokens, filler_text
from burstguard.workload import seed


def test_estimate_counts_cjk_per_character_and_ascii_at_four() -> None:
    assert count_tokens("abcd" * 25) == 25 and count_tokens("abcde") == 2
    assert count_tokens("中" * 10) == 17  # 1.7 per Han character
    assert count_tokens("，。「」") == 7  # CJK punctuation counts like CJK
    assert count_tokens("ab中") == 3  # ceil(2/4 + 1.7)
    assert count_tokens("") == 0
    for n in (1, 7, 100, 1000):  # the synthetic prompts stay exact
        assert count_tokens(filler_text(n)) == n


def test_seed_prompt_within_10_percent_of_smollm2(reference_tokenizer: Path) -> None:
    """The seed's Chinese prompt: the estimate within 10 % of SmolLM2's real count (the old
    4-characters rule said 7 of its ~44), and `auto` picks the real tokenizer."""
    prompt = seed.PROMPT
    real = load_tokenizer(reference_tokenizer).count(prompt)
    assert real > 20, real
    assert abs(count_tokens(prompt) - real) <= 0.10 * real, (count_tokens(prompt), real)
    auto = prompt_counter("auto", "smollm2-135m-instruct")
    assert auto.method.startswith("tokenizer ") and auto.count(prompt) == real
    chat = count_chat_tokens([{"role": "user", "content": prompt}], auto.count)
    assert chat == real + 7


def test_auto_falls_back_to_the_estimate_for_other_models() -> None:
    assert prompt_counter("auto", "llama3-8b") is ESTIMATED
    assert prompt_counter("auto", None) is ESTIMATED
    assert prompt_counter("estimate", "smollm2-135m-instruct") is ESTIMATED


def test_a_bad_tokenizer_path_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        with pytest.raises(BurstguardError, match=r"cannot load a tokenizer\.json"):
            prompt_counter(str(path), None)
