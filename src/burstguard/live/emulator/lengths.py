"""How many tokens a request generates when it does not ask for `ignore_eos`.

Real models stop at an end-of-sequence token, so output lengths vary. The emulator draws
them from a seeded lognormal with a configurable mean and shape (sigma 0 gives a fixed
length), capped by the request's max_tokens; `ignore_eos` requests get max_tokens exactly.
"""

from __future__ import annotations

import math
import random


class OutputLengthModel:
    def __init__(self, mean: float = 256.0, sigma: float = 0.8, seed: int = 0) -> None:
        if mean < 1:
            raise ValueError("output length mean must be at least 1 token")
        if sigma < 0:
            raise ValueError("output length sigma must be >= 0")
        self.mean = mean
        self.sigma = sigma
        self._mu = math.log(mean) - sigma * sigma / 2  # so that E[length] == mean
        self._rng = random.Random(seed)

    def output_tokens(self, max_tokens: int, ignore_eos: bool) -> int:
        """The number of tokens to generate; the result is in [1, max_tokens]."""
        if ignore_eos:
            return max_tokens
        drawn = self._rng.lognormvariate(self._mu, self.sigma) if self.sigma else self.mean
        return max(1, min(max_tokens, round(drawn)))
