"""The fit behind `burstguard calibrate`: measured step times -> a `FittedModel`.

Each sample is one engine step whose composition is known from how it was provoked (a lone
prefill of P tokens; B prompts of P tokens sent at once; a decode step of B running
requests holding C context tokens). The linear model
step = c0 + a*prefill + b*decode_seqs + c*context + r*prefill_seqs is fitted by
non-negative least squares on *relative* error, so the fast decode steps weigh as much as
long prefills. Lone and burst prefills together tell r (a cost per request, paid once per
prompt) from a (per prompt token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from burstguard.core.engine.perf_model import BatchShape, FittedModel


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured step: its shape and its duration in engine seconds."""

    kind: str  # "prefill" | "burst" | "decode"
    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    seconds: float
    prefill_seqs: int = 0

    def shape(self) -> BatchShape:
        return BatchShape(
            self.prefill_tokens, self.decode_seqs, self.context_tokens, 0, self.prefill_seqs
        )


def fit_step_model(samples: list[StepSample]) -> tuple[FittedModel, dict[str, Any]]:
    """The non-negative linear fit and its quality (relative errors per kind of sample)."""
    usable = [s for s in samples if s.seconds > 0]
    if len(usable) < 5:
        raise ValueError(f"need at least 5 measured steps to fit 5 coefficients, got {len(usable)}")
    rows = np.array(
        [[1.0, s.prefill_tokens, s.decode_seqs, s.context_tokens, s.prefill_seqs] for s in usable],
        dtype=float,
    )
    target = np.array([s.seconds for s in usable])
    coef, _ = nnls(rows / target[:, None], np.ones(len(usable)))
    model = FittedModel(*(float(c) for c in coef))
    quality: dict[str, Any] = {"samples": len(usable)}
    for kind in sorted({s.kind for s in usable}):
        errs = [abs(model.step_time(s.shape()) / s.seconds - 1) for s in usable if s.kind == kind]
        quality[f"{kind}_median_rel_error"] = round(float(np.median(errs)), 4)
        quality[f"{kind}_max_rel_error"] = round(float(np.max(errs)), 4)
    return model, quality
