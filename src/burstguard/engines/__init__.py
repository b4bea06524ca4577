"""Real reference engines (vLLM on CPU with SmolLM2-135M): install, convert, start."""
