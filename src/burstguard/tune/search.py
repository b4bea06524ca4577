"""Search strategies over candidates, run over worker processes, and the Pareto frontier.

- `grid_search`: every candidate on the whole workload (the reference).
- `coordinate_descent`: from a starting point, try every value of one knob with the
  others held, move to the best, go on with the next knob, and repeat until a whole
  pass moves nothing. Every evaluation is on the whole workload (a prefix or a sample
  of a bursty trace ranks configs differently: its queues never build up the same), and
  a grid of k knobs with v values each costs about passes x k x (v - 1) runs instead of
  v^k.
Candidates are ranked by goodput per replica-second, ties broken by SLO attainment, then
by lower cost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from burstguard.tune.objective import Trial
from burstguard.tune.space import Candidate

Objective = Callable[[Candidate], Trial]
Progress = Callable[[int], None]
"""Called with how many evaluations just finished."""


def rank_key(trial: Trial) -> tuple[float, float, float]:
    """Higher is better: goodput per replica-second, attainment, then lower cost."""
    return (trial.goodput_per_replica_s, trial.attainment, -trial.replica_seconds)


def best(trials: Iterable[Trial]) -> Trial:
    return max(trials, key=rank_key)


def pareto_front(trials: Iterable[Trial]) -> list[Trial]:
    """Trials no other beats on both cost (replica-seconds, lower) and SLO attainment
    (higher), cheapest first."""
    ordered = sorted(trials, key=lambda t: (t.replica_seconds, -t.attainment))
    front: list[Trial] = []
    for t in ordered:
        if not front or t.attainment > front[-1].attainment:
            front.append(t)
    return front


# -- running evaluations in worker processes ---------------------------------------------


class TrialRunner(Protocol):
    """What a search runs its candidates with: `Runner` (local processes) or
    `tune.ray_runner.RayRunner` (Ray tasks); `workers`: how many run at once."""

    workers: int
    evaluations: int

    def run(self, candidates: Sequence[Candidate]) -> list[Trial]: ...


_worker_objective: Objective | None = None


def _init_worker(objective: Objective) -> None:
    global _worker_objective
    _worker_objective = objective


def _run_in_worker(candidate: Candidate) -> Trial:
    assert _worker_objective is not None
    return _worker_objective(candidate)


@dataclass
class Runner:
    """Evaluates candidates in `workers` processes (1: in this one).
    The objective (and its workload) is sent to each worker once, not per task."""

    objective: Objective
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    progress: Progress | None = None
    evaluations: int = 0
    _pool: Executor | None = None

    def __enter__(self) -> Runner:
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(
                self.workers, initializer=_init_worker, initargs=(self.objective,)
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def run(self, candidates: Sequence[Candidate]) -> list[Trial]:
        """Every candidate, in the candidates' order."""
        self.evaluations += len(candidates)
        if self._pool is None:
            out = []
            for c in candidates:
                out.append(self.objective(c))
                if self.progress:
                    self.progress(1)
            return out
        futures = [self._pool.submit(_run_in_worker, c) for c in candidates]
        for f in futures:
            f.add_done_callback(lambda _: self.progress(1) if self.progress else None)
        return [f.result() for f in futures]


# -- strategies --------------------------------------------------------------------------


def grid_search(candidates: Sequence[Candidate], runner: TrialRunner) -> list[Trial]:
    """Every candidate on the whole workload."""
    return runner.run(candidates)


def coordinate_descent(
    axes: Mapping[str, Sequence[Any]],
    start: Candidate,
    runner: TrialRunner,
    valid: Callable[[Candidate], bool] = lambda _: True,
) -> list[Trial]:
    """Coordinate descent over `axes` from `start`; returns every trial it ran. Each
    knob's values are run together (in parallel); candidates `valid` refuses are skipped."""
    seen: dict[Candidate, Trial] = {}

    def run(cands: list[Candidate]) -> None:
        todo = [c for c in dict.fromkeys(cands) if c not in seen and valid(c)]
        for t in runner.run(todo):
            seen[t.candidate] = t

    run([start])
    if start not in seen:
        raise ValueError("the starting candidate is not valid")
    current = start
    for _ in range(len(axes) + 1):
        moved = False
        for knob, values in axes.items():
            options = [with_value(current, knob, v) for v in values]
            run(options)
            top = best(seen[c] for c in options if c in seen)
            if top.candidate != current and rank_key(top) > rank_key(seen[current]):
                current, moved = top.candidate, True
        if not moved:
            break
    return list(seen.values())


def with_value(candidate: Candidate, knob: str, value: Any) -> Candidate:
    """`candidate` with `knob` set to `value`: a one-knob neighbour."""
    return tuple((k, value if k == knob else v) for k, v in candidate)
