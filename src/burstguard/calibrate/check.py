"""Whether a calibration can be trusted: the checks `burstguard calibrate` runs on its own
measurements before it writes a profile (and records in it, `fitted.fit.check`).

A step-time fit is only as good as the minutes it was measured in. On a machine where
other work competes for the CPU, every step is slower by a varying amount and the fit
learns that noise (docs/fidelity.md: a fit made at load ~7 had 21-41 % median errors, and
an emulator driven by it was up to 34 % off the engine). Three checks catch it:

- **quiet**: before the probes, with the engine idle, the machine's CPUs must be mostly
  idle too (other work would slow the probes unevenly; the share after the probes is
  recorded only);
- **sentinel**: the same lone prefill, timed at the start and after each phase, must not
  drift (work that started during the probes shows here);
- **held back**: steps the fit was not shown (prefills between the probed lengths, a
  burst between the probed sizes, decode steps at other batch sizes over mid-length
  prompts) must be predicted within a bound: a fit that only matches its own samples is
  not a model of the engine.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field
from typing import Any

from burstguard.calibrate.fit import StepSample
from burstguard.core.engine.perf_model import FittedModel


@dataclass(frozen=True, slots=True)
class CheckBounds:
    """The bounds a calibration must meet (docs/fidelity.md says why these values)."""

    busy_fraction: float = 0.25
    sentinel_spread: float = 0.2
    held_back_median_error: float = 0.1
    held_back_max_error: float = 0.2


@dataclass(slots=True)
class Evidence:
    """What one calibration attempt measured beyond its fit samples."""

    busy_before: float | None = None  # share of the machine's CPUs busy, engine idle
    busy_after: float | None = None
    """Recorded, not bounded: right after the last probe the engine may still be winding
    down (on vLLM-CPU: 26 % right after the probes twice, 1 % just before them); work that
    competed during the probes shows in the sentinel's drift instead."""
    sentinel_s: list[float] = field(default_factory=list)
    held_back: list[StepSample] = field(default_factory=list)


def sentinel_spread(seconds: list[float]) -> float:
    """How far the slowest sentinel is above the fastest (0.2 = 20 % slower)."""
    return max(seconds) / min(seconds) - 1 if len(seconds) > 1 and min(seconds) > 0 else 0.0


def held_back_errors(model: FittedModel, samples: list[StepSample]) -> list[float]:
    """|predicted / measured - 1| for each held-back step."""
    return [abs(model.step_time(s.shape()) / s.seconds - 1) for s in samples if s.seconds > 0]


def failures(model: FittedModel, ev: Evidence, bounds: CheckBounds) -> list[str]:
    """Why this attempt cannot be trusted, in words; empty when it can."""
    out = []
    if ev.busy_before is not None and ev.busy_before > bounds.busy_fraction:
        out.append(
            f"the machine was busy before the probes: {ev.busy_before:.0%} of its CPUs in use "
            f"with the engine idle (bound {bounds.busy_fraction:.0%})"
        )
    spread = sentinel_spread(ev.sentinel_s)
    if spread > bounds.sentinel_spread:
        times = ", ".join(f"{s * 1e3:.0f}" for s in ev.sentinel_s)
        out.append(
            f"the same prefill drifted {spread:.0%} during the probes ({times} ms; bound "
            f"{bounds.sentinel_spread:.0%}): something else ran on the machine"
        )
    errors = held_back_errors(model, ev.held_back)
    if errors:
        median, worst = statistics.median(errors), max(errors)
        if median > bounds.held_back_median_error or worst > bounds.held_back_max_error:
            out.append(
                f"the fit predicts the {len(errors)} held-back steps with median error "
                f"{median:.1%}, worst {worst:.1%} (bounds {bounds.held_back_median_error:.0%}, "
                f"{bounds.held_back_max_error:.0%})"
            )
    return out


def record(
    model: FittedModel, ev: Evidence, bounds: CheckBounds, attempt: int, why: list[str]
) -> dict[str, Any]:
    """The check as the profile records it (`fitted.fit.check`); `why`: its `failures`."""
    errors = held_back_errors(model, ev.held_back)
    by_kind: dict[str, float] = {}
    for s, err in zip([s for s in ev.held_back if s.seconds > 0], errors, strict=True):
        by_kind[s.kind] = max(by_kind.get(s.kind, 0.0), err)
    return {
        "passed": not why,
        "failures": why,
        "attempt": attempt,
        "busy_before": None if ev.busy_before is None else round(ev.busy_before, 3),
        "busy_after": None if ev.busy_after is None else round(ev.busy_after, 3),
        "sentinel_ms": [round(s * 1e3, 1) for s in ev.sentinel_s],
        "sentinel_spread": round(sentinel_spread(ev.sentinel_s), 4),
        "held_back": len(errors),
        "held_back_median_rel_error": round(statistics.median(errors), 4) if errors else None,
        "held_back_max_rel_error": round(max(errors), 4) if errors else None,
        "held_back_max_rel_error_by_kind": {k: round(v, 4) for k, v in sorted(by_kind.items())},
        "bounds": {
            "busy_fraction": bounds.busy_fraction,
            "sentinel_spread": bounds.sentinel_spread,
            "held_back_median_error": bounds.held_back_median_error,
            "held_back_max_error": bounds.held_back_max_error,
        },
    }


def between(values: list[int], exclude: list[int]) -> list[int]:
    """Geometric midpoints of consecutive values not already in `exclude`: the held-back
    probe points between the fitted ones."""
    ordered = sorted(set(values))
    mids = {round((a * b) ** 0.5) for a, b in itertools.pairwise(ordered)}
    return sorted(mids - set(exclude))
