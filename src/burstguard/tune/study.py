"""Searches proposed by Optuna: TPE for one objective, NSGA-II for the frontier.

The space is the grid `tune` always had (each knob a categorical of its values, engine
flags and scaling knobs together), so a candidate is still a `space.Candidate` and the
objectives are unchanged. What changes is who proposes the next one:

- `tpe`: Optuna's TPE sampler on goodput per replica-second (the rank `search.best`
  uses). A candidate is first run on a short slice of the workload (its start); Optuna's
  percentile pruner stops it there (after its first STARTUP_TRIALS) when its slice
  goodput is among the worst quarter of the candidates seen, so hopeless corners of a
  joint space cost a slice, not a run.
- `nsga2`: NSGA-II on two objectives, SLO-meeting requests (up) and replica-seconds
  (down): the goodput vs cost frontier. No pruning (Optuna prunes one objective only).

The budget counts simulations of the whole workload: a slice costs its share of the
requests, a candidate seen before (the sampler proposes it again) costs nothing and is
told its earlier values. Trials are asked in batches of `runner.workers` and run together
(local processes, or Ray tasks: `tune.ray_runner`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from burstguard.tune.objective import Trial
from burstguard.tune.space import Candidate

if TYPE_CHECKING:
    import optuna

    from burstguard.tune.search import TrialRunner

STRATEGIES = ("tpe", "nsga2")
SLICE_SHARE = 0.2  # the slice a tpe candidate is first run on: this share of the requests
PRUNE_PERCENTILE = 25.0  # pruned when its slice goodput is below this percentile
STARTUP_TRIALS = 6  # candidates run in full before the pruner may stop one (and TPE's)
MAX_ASKS_PER_SIMULATION = 20  # gives up when the sampler only repeats itself


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
    config), so a search never reports worse than where a user stands."""
    import optuna

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = list(axes)
    choices = {k: list(v) for k, v in axes.items()}
    multi = strategy == "nsga2"
    study = _study(strategy, seed, len(choices))
    if start is not None and valid(start):
        study.enqueue_trial(dict(start))
    seen: dict[Candidate, Trial] = {}
    sliced: dict[Candidate, float] = {}  # slice goodput of candidates seen
    pruned: set[Candidate] = set()
    spent, asks = 0.0, 0
    batch = max(1, runner.workers)
    total = math.prod(len(v) for v in choices.values())
    while spent < budget - 1e-9 and len(seen) + len(pruned) < total:
        asks += 1
        if asks > MAX_ASKS_PER_SIMULATION * max(1.0, budget):
            break
        asked: list[tuple[optuna.trial.Trial, Candidate]] = []
        want = max(1, min(batch, math.ceil(budget - spent)))
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
        if not multi and slice_runner is not None:  # the pruner waits for its startup
            asked, cost = _prune(study, asked, slice_runner, slice_share, sliced, pruned)
            spent += cost
        todo = [c for _, c in asked]
        for (trial, cand), result in zip(asked, runner.run(todo), strict=True):
            seen[cand] = result
            spent += 1.0
            study.tell(trial, _values(result, multi))
    return list(seen.values())


def _study(strategy: str, seed: int, knobs: int) -> optuna.Study:
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    if strategy == "nsga2":
        sampler: optuna.samplers.BaseSampler = optuna.samplers.NSGAIISampler(
            seed=seed, population_size=max(8, 2 * knobs)
        )
        return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS,
                                         multivariate=True, group=True)  # fmt: skip
    pruner = optuna.pruners.PercentilePruner(
        PRUNE_PERCENTILE, n_startup_trials=STARTUP_TRIALS, n_warmup_steps=0
    )
    return optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)


def _values(trial: Trial, multi: bool) -> float | list[float]:
    """What Optuna is told: goodput per replica-s (tpe), or (met, replica-s) (nsga2)."""
    if multi:
        return [float(trial.met), trial.replica_seconds]
    # attainment breaks ties, as `search.rank_key` does, without moving the ranking
    return trial.goodput_per_replica_s + 1e-9 * trial.attainment


def _prune(
    study: optuna.Study,
    asked: list[tuple[optuna.trial.Trial, Candidate]],
    slice_runner: TrialRunner,
    share: float,
    sliced: dict[Candidate, float],
    pruned: set[Candidate],
) -> tuple[list[tuple[optuna.trial.Trial, Candidate]], float]:
    """Runs the batch on the slice, reports it at step 0 and tells the pruned ones; the
    survivors and what the slices cost (in whole-workload simulations)."""
    import optuna

    results = slice_runner.run([c for _, c in asked])
    keep = []
    for (trial, cand), result in zip(asked, results, strict=True):
        sliced[cand] = result.goodput_per_replica_s
        trial.report(result.goodput_per_replica_s, 0)
        if trial.should_prune():
            pruned.add(cand)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            keep.append((trial, cand))
    return keep, share * len(asked)
