"""Request shapes: token-length models and class/tenant label mixes, parsed from short specs.

Length specs: `128` (fixed), `uniform:100-400`, `lognormal:mean=500,sigma=0.8`
(mean of the distribution, sigma of the underlying normal), `zipf:a=1.5,max=4096`,
`empirical:TRACE[:input|output]` (sampled from a trace's lengths).
Mix specs: `interactive=0.7,batch=0.3` (weights are normalised).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from burstguard.errors import ConfigError


def parse_key_values(text: str, context: str) -> dict[str, float]:
    """`a=1,b=2.5` -> {"a": 1.0, "b": 2.5}; errors start with `context` (the flag or spec)."""
    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{context}: expected key=number in {part!r}") from None
    return out


def sample_lengths(spec: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draws `n` token lengths (>= 1) from a length spec."""
    spec = str(spec).strip()
    kind, _, rest = spec.partition(":")
    if not rest:
        try:
            value = int(kind)
        except ValueError:
            raise ConfigError(
                f"bad length spec {spec!r}: use a number, uniform:A-B, lognormal:mean=M,sigma=S, "
                "zipf:a=A,max=M or empirical:TRACE[:input|output]"
            ) from None
        if value < 1:
            raise ConfigError(f"bad length spec {spec!r}: must be >= 1")
        return np.full(n, value, dtype=np.int64)
    if kind == "uniform":
        low, sep, high = rest.partition("-")
        try:
            lo, hi = int(low), int(high)
        except ValueError:
            raise ConfigError(f"bad length spec {spec!r}: expected uniform:A-B") from None
        if not sep or lo < 1 or hi < lo:
            raise ConfigError(f"bad length spec {spec!r}: expected uniform:A-B with 1 <= A <= B")
        return rng.integers(lo, hi + 1, n)
    if kind == "lognormal":
        p = parse_key_values(rest, f"bad length spec {spec!r}")
        mean, sigma = p.get("mean", 256.0), p.get("sigma", 0.8)
        mu = np.log(mean) - sigma**2 / 2
        return np.maximum(1, np.round(rng.lognormal(mu, sigma, n))).astype(np.int64)
    if kind == "zipf":
        p = parse_key_values(rest, f"bad length spec {spec!r}")
        a, cap = p.get("a", 1.5), int(p.get("max", 4096))
        if a <= 1:
            raise ConfigError(f"bad length spec {spec!r}: zipf needs a > 1")
        return np.minimum(rng.zipf(a, n), cap).astype(np.int64)
    if kind == "empirical":
        from burstguard.workload.traces import load_workload

        path, _, column = rest.partition(":")
        trace = load_workload(Path(path))
        values = trace.output_tokens if column == "output" else trace.prompt_tokens
        if len(values) == 0:
            raise ConfigError(f"{path}: empty trace, cannot sample lengths")
        return np.maximum(1, rng.choice(values, n)).astype(np.int64)
    raise ConfigError(f"bad length spec {spec!r}: unknown model {kind!r}")


def parse_mix(spec: str) -> dict[str, float]:
    """`interactive=0.7,batch=0.3` -> normalised weights."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = part.partition("=")
        try:
            weight = float(value) if sep else 1.0
        except ValueError:
            raise ConfigError(f"bad mix {spec!r}: weight of {name!r} is not a number") from None
        if not name or not 0 <= weight < math.inf:  # nan and inf too
            raise ConfigError(f"bad mix {spec!r}: expected name=weight with weight >= 0")
        weights[name] = weight
    total = sum(weights.values())
    if total <= 0:
        raise ConfigError(f"bad mix {spec!r}: weights sum to zero")
    return {k: v / total for k, v in weights.items()}


def sample_labels(spec: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draws `n` labels from a mix spec (object array)."""
    mix = parse_mix(spec)
    names = np.array(list(mix), dtype=object)
    return names[rng.choice(len(names), n, p=list(mix.values()))]
