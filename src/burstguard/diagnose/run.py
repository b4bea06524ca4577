"""What diagnose reads from one recorded run: bench run directories and sim summaries
become the same `RunData`, so every step below looks at one shape of data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from burstguard.report.compare import KV_METRICS, QUEUE_METRICS, preemptions, server_column
from burstguard.wire.records import RequestRecord, read_records
from burstguard.wire.summary import read_summary

RUNNING_METRICS = ("vllm:num_requests_running",)
STEP_TOKENS_SUM = ("vllm:iteration_tokens_total_sum",)
STEP_COUNT = ("vllm:iteration_tokens_total_count",)
REPLICA_METRICS = ("replicas", "burstguard_replicas")


@dataclass
class RunData:
    """One run: its summary, its records (empty for a sim summary without --records), the
    scraped (or simulated) engine series as arrays, and the engine settings where known."""

    name: str
    summary: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)
    t: np.ndarray | None = None
    waiting: np.ndarray | None = None
    running: np.ndarray | None = None
    kv: np.ndarray | None = None
    step_tokens: np.ndarray | None = None  # cumulative sum of tokens over engine steps
    steps: np.ndarray | None = None  # cumulative count of engine steps
    replicas: np.ndarray | None = None
    engine: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return str(self.summary.get("source", "bench"))

    @property
    def has_series(self) -> bool:
        return self.t is not None and self.t.size > 0

    @classmethod
    def from_summary(
        cls, name: str, summary: dict[str, Any], records: list[RequestRecord] | None = None
    ) -> RunData:
        series = summary.get("server_series")
        t = None
        if isinstance(series, dict) and series.get("t"):
            t = np.asarray(series["t"], dtype=np.float64)
        engine = summary.get("engine")
        return cls(
            name=name,
            summary=summary,
            records=list(records or []),
            t=t,
            waiting=server_column(summary, QUEUE_METRICS),
            running=server_column(summary, RUNNING_METRICS),
            kv=server_column(summary, KV_METRICS),
            step_tokens=server_column(summary, STEP_TOKENS_SUM),
            steps=server_column(summary, STEP_COUNT),
            replicas=server_column(summary, REPLICA_METRICS),
            engine=dict(engine) if isinstance(engine, dict) else {},
        )

    def preemptions(self) -> float | None:
        """Preemptions during the run: the sim's own count, else the counter's increase."""
        return preemptions(self.summary)


def _is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file()


def expand(path: Path) -> list[Path]:
    """A run directory, a summary file, or a scenario directory (its `steady/` and
    `burst/` legs, in that order); raises ValueError naming what is missing."""
    if path.is_file():
        return [path]
    if _is_run_dir(path):
        return [path]
    legs = [path / leg for leg in ("steady", "burst") if _is_run_dir(path / leg)]
    if legs:
        return legs
    if path.is_dir():
        raise ValueError(f"{path}: no summary.json here (nor steady/ or burst/ legs)")
    raise ValueError(f"{path}: no such run directory or summary file")


def load(path: Path) -> RunData:
    """A bench run directory (summary.json and its records.jsonl) or a summary file
    (`sim --json`); raises ValueError naming the file that is not one."""
    spath = path / "summary.json" if path.is_dir() else path
    summary = read_summary(spath)
    rpath = spath.parent / "records.jsonl"
    beside = path.is_dir() or spath.name == "summary.json"  # a run directory's own records
    records = list(read_records(rpath)) if beside and rpath.is_file() else []
    name = str(path)
    return RunData.from_summary(name, summary, records)
