"""Where burstguard keeps what it builds once per machine (~/.cache/burstguard, or
$BURSTGUARD_CACHE): the engines' venvs, the reference model, this machine's profiles.
Names only, no I/O, so that the engine core and the tokenizer can find their files
without importing the engine installers (`burstguard.engines`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ROOT", "MODEL_DIR", "MODEL_NAME"]

CACHE_ROOT = Path(os.environ.get("BURSTGUARD_CACHE", Path.home() / ".cache" / "burstguard"))
MODEL_NAME = "smollm2-135m-instruct"
"""The reference model's served name (SmolLM2-135M-Instruct)."""
MODEL_DIR = CACHE_ROOT / "models" / "smollm2-135m-instruct-bf16"
"""The reference model, converted to bf16 safetensors by `make vllm-cpu`."""
