"""Convert a GGUF checkpoint into a bf16 safetensors model directory that vLLM-CPU loads.

Runs inside the reference-engine venv (it needs torch, transformers, gguf and accelerate,
which burstguard itself does not), so it imports nothing from burstguard:

    ENGINE_PY convert_gguf.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out DIR

transformers dequantizes GGUF weights on load but flags the model as GGUF-quantized and
then refuses `save_pretrained`; building a fresh model from the same config without the
`quantization_config` and loading the dequantized state dict into it avoids that.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Write config, tokenizer and bf16 weights of `gguf_path` to `out_dir` atomically."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings: lm_head.weight is legitimately absent from the state dict.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing={missing} unexpected={unexpected}")

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "burstguard-source.json").write_text(
        json.dumps({"gguf": str(gguf_path), "dtype": "bfloat16"}, indent=2) + "\n"
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True, help="the .gguf file")
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    args = parser.parse_args(argv)
    if not args.gguf.is_file():
        print(f"error: {args.gguf} not found", file=sys.stderr)
        return 2
    convert(args.gguf.resolve(), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
