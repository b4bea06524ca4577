"""`tune --search tpe|nsga2`: Optuna proposes the candidates, within the budget of
simulations, repeats cost nothing, and the pruning slice stops hopeless candidates."""

from __future__ import annotations

from burstguard.tune.objective import Trial
from burstguard.tune.search import Runner, best
from burstguard.tune.space import Candidate
from burstguard.tune.study import design_size, initial_design, optuna_search

AXES = {"a": (0, 1, 2, 3, 4, 5), "b": (0, 1, 2, 3, 4, 5)}


def score(candidate: Candidate, requests: int = 100) -> Trial:
    """Goodput peaks at a=4, b=1; cost grows with a (a frontier along it)."""
    v = dict(candidate)
    met = max(0, requests - 8 * abs(v["a"] - 4) - 15 * abs(v["b"] - 1))
    return Trial(candidate, requests, met, 10.0 + v["a"])


def test_tpe_finds_a_good_candidate_within_the_budget() -> None:
    with Runner(score, workers=1) as runner:
        trials = optuna_search("tpe", AXES, runner, budget=20, start=(("a", 0), ("b", 5)))
    assert runner.evaluations == len(trials) <= 20
    assert len({t.candidate for t in trials}) == len(trials)  # a repeat is not run again
    top = best(trials)
    assert top.met >= 85, top  # the grid's best is 100, its median ~55


def test_nsga2_spends_its_budget_on_distinct_candidates() -> None:
    with Runner(score, workers=1) as runner:
        trials = optuna_search("nsga2", AXES, runner, budget=16)
    assert runner.evaluations == len(trials) == 16
    assert len({t.candidate for t in trials}) == 16


def test_pruning_on_a_slice_saves_whole_runs() -> None:
    def sliced(candidate: Candidate) -> Trial:
        return score(candidate, requests=20)

    with Runner(score, workers=1) as runner, Runner(sliced, workers=1) as part:
        trials = optuna_search("tpe", AXES, runner, budget=12, slice_runner=part)
    assert part.evaluations > runner.evaluations > design_size(AXES, 12)  # some pruned
    assert runner.evaluations + 0.2 * part.evaluations <= 12 + 1e-9
    assert runner.evaluations == len(trials)


def test_the_initial_design_is_the_start_and_its_one_knob_neighbours() -> None:
    start = (("a", 1), ("b", 0))
    design = initial_design(AXES, start, size=7)
    assert design == [
        start,
        (("a", 5), ("b", 0)),  # each knob's farthest value first, round-robin
        (("a", 1), ("b", 5)),
        (("a", 4), ("b", 0)),
        (("a", 1), ("b", 4)),
        (("a", 3), ("b", 0)),
        (("a", 1), ("b", 3)),
    ]
    assert design_size(AXES, budget=40) == 11  # every value of every knob seen once
    assert design_size(AXES, budget=12) == 6  # at most half the budget


def test_the_searches_run_the_initial_design_first() -> None:
    start = (("a", 0), ("b", 5))
    design = initial_design(AXES, start, design_size(AXES, 14))
    for strategy in ("tpe", "nsga2", "motpe"):
        with Runner(score, workers=1) as runner:
            trials = optuna_search(strategy, AXES, runner, budget=14, start=start)
        assert [t.candidate for t in trials[: len(design)]] == design, strategy
        assert len(trials) == 14


def test_pruning_slices_count_against_the_budget() -> None:
    def sliced(candidate: Candidate) -> Trial:
        return score(candidate, requests=20)

    for budget in (7.0, 12.0, 13.5):
        with Runner(score, workers=2) as runner, Runner(sliced, workers=2) as part:
            optuna_search("tpe", AXES, runner, budget=budget, slice_runner=part)
        assert runner.evaluations + 0.2 * part.evaluations <= budget + 1e-9


def test_after_the_design_the_searches_try_its_additive_prediction() -> None:
    """From a=0, b=5 the design's best one-knob moves are a=4 and b=1 (each alone well
    short of the optimum); together they are the optimum, tried next."""
    start = (("a", 0), ("b", 5))
    size = design_size(AXES, 14)
    for strategy in ("tpe", "nsga2", "motpe"):
        with Runner(score, workers=1) as runner:
            trials = optuna_search(strategy, AXES, runner, budget=14, start=start)
        assert max(t.met for t in trials[:size]) < 70, strategy
        assert trials[size].candidate == (("a", 4), ("b", 1)), strategy
        assert trials[size].met == 100
