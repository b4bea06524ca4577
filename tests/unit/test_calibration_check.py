"""calibrate's own check (calibrate/check.py) and the machine's busy share (quiet.py)."""

from __future__ import annotations

from burstguard.calibrate.check import (
    CheckBounds,
    Evidence,
    between,
    failures,
    record,
    sentinel_spread,
)
from burstguard.calibrate.fit import StepSample, fit_step_model
from burstguard.calibrate.quiet import busy_fraction, cpu_times
from burstguard.core.engine.perf_model import FittedModel

TRUTH = FittedModel(0.004, 1e-4, 2e-3, 2e-6, 5e-4)


def steps(model: FittedModel, slower: float = 1.0) -> tuple[list[StepSample], list[StepSample]]:
    """Fit samples from `model`, and held-back samples from it run `slower` times."""

    def sample(kind: str, p: int, b: int, c: int, seqs: int, k: float) -> StepSample:
        s = StepSample(kind, p, b, c, 0.0, seqs)
        return StepSample(kind, p, b, c, model.step_time(s.shape()) * k, seqs)

    fit = [sample("prefill", n, 0, 0, 1, 1.0) for n in (32, 128, 256, 512, 1024)]
    fit += [sample("burst", 64 * b, 0, 0, b, 1.0) for b in (4, 12, 24)]
    fit += [sample("decode", 0, b, b * c, 0, 1.0) for b in (1, 4, 16, 32) for c in (40, 540)]
    held = [sample("prefill", n, 0, 0, 1, slower) for n in between([32, 128, 512, 1024], [])]
    held += [sample("decode", 0, b, b * 100, 0, slower) for b in (3, 11, 20)]
    return fit, held


def test_a_fit_predicts_its_held_back_steps_and_passes() -> None:
    fit, held = steps(TRUTH)
    model, _ = fit_step_model(fit)
    ev = Evidence(busy_before=0.05, busy_after=0.1, sentinel_s=[0.1, 0.104, 0.101], held_back=held)
    assert failures(model, ev, CheckBounds()) == []
    rec = record(model, ev, CheckBounds(), 1, failures(model, ev, CheckBounds()))
    assert rec["passed"] and rec["held_back"] == len(held) and rec["held_back_max_rel_error"] < 0.01


def test_a_fit_that_cannot_tell_its_terms_apart_fails_on_held_back_steps() -> None:
    """Decode probed at one context per sequence only: the fit cannot split the
    per-sequence from the per-context-token cost and mispredicts other contexts."""
    fit, held = steps(TRUTH)
    model, _ = fit_step_model([s for s in fit if s.kind != "decode" or s.context_tokens
                               == s.decode_seqs * 40])  # fmt: skip
    assert any("held-back" in w for w in failures(model, Evidence(held_back=held), CheckBounds()))


def test_held_back_steps_slower_than_the_fit_fail_it() -> None:
    """The engine ran 30 % slower while the held-back steps were timed (work started on
    the machine): the fit does not describe the engine any more."""
    fit, held = steps(TRUTH, slower=1.3)
    model, _ = fit_step_model(fit)
    why = failures(model, Evidence(held_back=held), CheckBounds())
    assert len(why) == 1 and "held-back" in why[0]
    assert record(model, Evidence(held_back=held), CheckBounds(), 2, why)["passed"] is False


def test_a_drifting_sentinel_or_a_busy_machine_fails_the_check() -> None:
    fit, held = steps(TRUTH)
    model, _ = fit_step_model(fit)
    drift = Evidence(sentinel_s=[0.100, 0.104, 0.131], held_back=held)
    assert sentinel_spread(drift.sentinel_s) > 0.3
    assert ["drifted" in w for w in failures(model, drift, CheckBounds())] == [True]
    busy = Evidence(busy_before=0.6, held_back=held)
    assert ["busy before" in w for w in failures(model, busy, CheckBounds())] == [True]


def test_held_back_points_lie_between_the_probed_ones() -> None:
    assert between([32, 128, 256, 512, 1024], [32, 128, 256, 512, 1024]) == [64, 181, 362, 724]
    assert between([1, 2, 4, 8, 16, 24, 32], [1, 2, 4, 8, 16, 24, 32]) == [3, 6, 11, 20, 28]
    assert between([4, 24], [4, 12, 24]) == [10]


def test_busy_share_from_proc_stat() -> None:
    before = cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = cpu_times("cpu  250 0 100 900 50 0 0 0 0 0\n")
    assert before == (150, 1000) and after == (350, 1300)
    assert busy_fraction(before, after) == 200 / 300
    assert cpu_times("intr 1 2 3\n") is None
