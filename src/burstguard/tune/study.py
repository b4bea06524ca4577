"""Searches proposed by Optuna: TPE for one objective, NSGA-II for the frontier.

The space is the grid `tune` always had (each knob a categorical of its values, engine
flags and scaling knobs together), so a candidate is still a `space.Candidate` and the
objectives are unchanged. What changes is who proposes the next one:

- `tpe`: Optuna's TPE sampler on goodput per replica-second (the rank `search.best`
  uses). With a `slice_runner`, a candidate is first run on a short slice of the workload
  (its start); Optuna's percentile pruner stops it there (after the initial design) when
  its slice goodput is among the worst quarter of the candidates seen, so hopeless corners
  of a joint space cost a slice, not a run.
- `nsga2`: NSGA-II on two objectives, SLO-meeting requests (up) and replica-seconds
  (down): the goodput vs cost frontier, its first generation the initial design. No
  pruning (Optuna prunes one objective only).

Both start from an initial design instead of random trials: the start (the base config)
and its one-knob neighbours, the same points a coordinate descent's first pass tries
around it, each knob's farthest value first, round-robin over the knobs, up to half the
budget (`design_size`). On a budget of tens of simulations random startup trials are most
of the search; a design that moves one knob at a time shows the sampler each knob's
effect from a point known to be sane, and the other half is the sampler's. The first
trial after the design is what it predicts if the knobs' effects add up (`combined`: each
knob at its best one-knob move), the step a descent takes a knob at a time.

The budget counts simulations of the whole workload: a slice costs its share of the
requests, a candidate seen before (the sampler proposes it again) costs nothing and is
told its earlier values. Trials are asked in batches of `runner.workers` and run together
(local processes, or Ray tasks: `tune.ray_runner`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from burstguard.tune.objective import Trial
from burstguard.tune.search import rank_key, with_value
from burstguard.tune.space import Candidate

if TYPE_CHECKING:
    import optuna

    from burstguard.tune.search import TrialRunner

STRATEGIES = ("tpe", "nsga2", "motpe")
SLICE_SHARE = 0.2  # the slice a tpe candidate is first run on: this share of the requests
PRUNE_PERCENTILE = 25.0  # pruned when its slice goodput is below this percentile
DESIGN_SHARE = 0.5  # at most this share of the budget goes to the initial design
MAX_ASKS_PER_SIMULATION = 20  # gives up when the sampler only repeats itself


def design_size(axes: Mapping[str, Sequence[Any]], budget: float) -> int:
    """How many trials the initial design (or, without a start, random startup) gets:
    enough to see every value of every knob once (1 + sum of (values - 1)), at most
    half the budget, at least one."""
    one_at_a_time = 1 + sum(len(v) - 1 for v in axes.values())
    return max(1, min(one_at_a_time, int(DESIGN_SHARE * budget)))


def initial_design(
    axes: Mapping[str, Sequence[Any]],
    start: Candidate,
    size: int,
    valid: Callable[[Candidate], bool] = lambda _: True,
) -> list[Candidate]:
    """`start`, then its one-knob neighbours (the others held at the start's), round-robin
    over the knobs, each knob's values farthest from the start's first; valid ones only,
    at most `size`."""
    at = dict(start)
    rows = []
    for knob, values in axes.items():
        here = list(values).index(at[knob]) if at[knob] in values else 0
        others = sorted((i for i in range(len(values)) if i != here), key=lambda i: -abs(i - here))
        rows.append([with_value(start, knob, values[i]) for i in others])
    order = [start] + [c for tier in itertools.zip_longest(*rows) for c in tier if c is not None]
    return [c for c in dict.fromkeys(order) if valid(c)][:size]


def optuna_search(
    strategy: str,
    axes: Mapping[str, Sequence[Any]],
    runner: TrialRunner,
    budget: float,
    valid: Callable[[Candidate], bool] = lambda _: True,
    slice_runner: TrialRunner | None = None,
    slice_share: float = SLICE_SHARE,
    start: Candidate | None = None,
    seed: int = 0,
) -> list[Trial]:
    """Every whole-workload trial `strategy` ran within `budget` simulations.
    `slice_runner` (tpe): the same objective on the workload's first `slice_share` of
    requests, the pruning stage (None: no pruning). `start`: tried first (the base
    config), so a search never reports worse than where a user stands, and with its
    one-knob neighbours the initial design (`initial_design`); without it the sampler's
    startup trials are random."""
    import optuna

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = list(axes)
    choices = {k: list(v) for k, v in axes.items()}
    multi = strategy != "tpe"
    size = design_size(choices, budget)
    design = [] if start is None else initial_design(choices, start, size, valid)
    study = _study(strategy, seed, size)
    for cand in design:
        study.enqueue_trial(dict(cand))
    seen: dict[Candidate, Trial] = {}
    pruned: set[Candidate] = set()
    spent, asks = 0.0, 0
    pruning = not multi and slice_runner is not None
    each = 1.0 + (slice_share if pruning else 0.0)  # what a candidate may cost at most
    batch = max(1, runner.workers)
    total = math.prod(len(v) for v in choices.values())
    while spent < budget - 1e-9 and len(seen) + len(pruned) < total:
        asks += 1
        if asks > MAX_ASKS_PER_SIMULATION * max(1.0, budget):
            break
        asked: list[tuple[optuna.trial.Trial, Candidate]] = []
        want = min(batch, math.floor((budget - spent) / each + 1e-9))
        if want < 1:
            break
        while len(asked) < want:
            trial = study.ask()
            cand = tuple((k, trial.suggest_categorical(k, choices[k])) for k in names)
            if not valid(cand):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif cand in seen:
                study.tell(trial, _values(seen[cand], multi))
            elif cand in pruned or any(c == cand for _, c in asked):
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                asked.append((trial, cand))
                continue
            asks += 1
            if asks > MAX_ASKS_PER_SIMULATION * max(1.0, budget):
                break
        if not asked:
            break
        if pruning:  # the pruner waits for the initial design
            assert slice_runner is not None
            asked, cost = _prune(study, asked, slice_runner, slice_share, pruned)
            spent += cost
        todo = [c for _, c in asked]
        for (trial, cand), result in zip(asked, runner.run(todo), strict=True):
            seen[cand] = result
            spent += 1.0
            study.tell(trial, _values(result, multi))
        if design and all(c in seen or c in pruned for c in design):
            combo = combined(design[0], seen)
            if combo not in seen and valid(combo):
                study.enqueue_trial(dict(combo))
            design = []
    return list(seen.values())


def combined(start: Candidate, trials: Mapping[Candidate, Trial]) -> Candidate:
    """What the initial design predicts if the knobs' effects add up: each knob at the
    value whose one-knob move from `start` ranked best (`search.rank_key`), where it beat
    the start; the others at the start's."""
    if start not in trials:
        return start
    out = dict(start)
    for knob, here in start:
        row = [t for c, t in trials.items() if dict(c)[knob] != here
               and with_value(c, knob, here) == start]  # fmt: skip
        top = max(row, key=rank_key, default=None)
        if top is not None and rank_key(top) > rank_key(trials[start]):
            out[knob] = dict(top.candidate)[knob]
    return tuple(out.items())


def _study(strategy: str, seed: int, startup: int) -> optuna.Study:
    """`startup`: the initial design's size: NSGA-II's population (its first generation is
    the design), TPE's startup trials and the pruner's."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    sampler: optuna.samplers.BaseSampler
    if strategy == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, startup))
        return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                         multivariate=True, group=True)  # fmt: skip
    if strategy == "motpe":
        return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    pruner = optuna.pruners.PercentilePruner(
        PRUNE_PERCENTILE, n_startup_trials=startup, n_warmup_steps=0
    )
    return optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)


def _values(trial: Trial, multi: bool) -> float | list[float]:
    """What Optuna is told: goodput per replica-s (tpe), or (met, replica-s) (nsga2, motpe)."""
    if multi:
        return [float(trial.met), trial.replica_seconds]
    # attainment breaks ties, as `search.rank_key` does, without moving the ranking
    return trial.goodput_per_replica_s + 1e-9 * trial.attainment


def _prune(
    study: optuna.Study,
    asked: list[tuple[optuna.trial.Trial, Candidate]],
    slice_runner: TrialRunner,
    share: float,
    pruned: set[Candidate],
) -> tuple[list[tuple[optuna.trial.Trial, Candidate]], float]:
    """Runs the batch on the slice, reports it at step 0 and tells the pruned ones; the
    survivors and what the slices cost (in whole-workload simulations)."""
    import optuna

    results = slice_runner.run([c for _, c in asked])
    keep = []
    for (trial, cand), result in zip(asked, results, strict=True):
        trial.report(result.goodput_per_replica_s, 0)
        if trial.should_prune():
            pruned.add(cand)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            keep.append((trial, cand))
    return keep, share * len(asked)
