"""Trials as Ray tasks on an existing Ray cluster (`tune --ray ADDRESS`; KubeRay in
production): the objective, with its workload, is put in Ray's object store once and
every task reads it from there, so a trace crosses the network once per node, not once
per trial. Ray is an optional extra (`pip install burstguard[ray]`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from burstguard.errors import UserError
from burstguard.tune.objective import Trial
from burstguard.tune.search import Objective, Progress
from burstguard.tune.space import Candidate


def _evaluate(objective: Objective, candidate: Candidate) -> Trial:
    return objective(candidate)


@dataclass
class RayRunner:
    """`search.Runner`'s interface over a Ray cluster at `address` ("auto", or
    "HOST:PORT" of its GCS); `workers`: trials in flight at once (0: the cluster's CPUs)."""

    objective: Objective
    address: str
    workers: int = 0
    progress: Progress | None = None
    evaluations: int = 0
    _ref: Any = None
    _task: Any = None
    _owns: bool = False

    def __enter__(self) -> RayRunner:
        try:
            import ray
        except ImportError:
            raise UserError(
                "--ray needs Ray: pip install 'burstguard[ray]' (the same version as the cluster)"
            ) from None
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)
            except ConnectionError as exc:
                raise UserError(f"--ray {self.address}: no Ray cluster there ({exc})") from None
            self._owns = True
        if self.workers <= 0:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._ref = ray.put(self.objective)  # once: every task reads this copy
        self._task = ray.remote(num_cpus=1, max_retries=1)(_evaluate)
        return self

    def __exit__(self, *exc: Any) -> None:
        import ray

        if self._owns:
            ray.shutdown()

    def run(self, candidates: Sequence[Candidate]) -> list[Trial]:
        """Every candidate, in the candidates' order."""
        import ray

        self.evaluations += len(candidates)
        pending = [self._task.remote(self._ref, c) for c in candidates]
        index = {ref: i for i, ref in enumerate(pending)}
        out: list[Trial | None] = [None] * len(pending)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                out[index[ref]] = ray.get(ref)
                if self.progress:
                    self.progress(1)
        return [t for t in out if t is not None]
