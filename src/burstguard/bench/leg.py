"""One bench leg, end to end: run in this process or spread over worker processes
(`bench.workers`), then its summary (DIR/summary.json) from the records and the scrapes."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from burstguard.bench.runner import BenchConfig, Reporter, _run, new_loop
from burstguard.bench.workers import run_workers
from burstguard.scrape import MetricsPoller
from burstguard.wire.records import RecordWriter, RequestRecord
from burstguard.wire.summary import prefix_cache_from_series, summarize, write_summary
from burstguard.workload.spec import Workload


def run_bench(
    config: BenchConfig, workload: Workload, reporter: Reporter | None = None
) -> dict[str, Any]:
    """Runs one leg; writes DIR/records.jsonl (as it goes) and DIR/summary.json."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    records_path = config.out_dir / "records.jsonl"
    records_path.unlink(missing_ok=True)
    cycle_log = None
    if config.workers > 1:
        records, poller, interrupted = run_workers(config, workload, reporter)
    else:
        with RecordWriter(records_path) as writer, asyncio.Runner(loop_factory=new_loop) as r:
            run, poller, interrupted = r.run(_run(config, workload, writer, reporter, config.shard))
        records = run.records
        cycle_log = run.cycle.log if run.cycle is not None else None
    return summarize_leg(config, workload, records, poller, interrupted, cycle_log)


def summarize_leg(
    config: BenchConfig,
    workload: Workload,
    records: list[RequestRecord],
    poller: MetricsPoller | None,
    interrupted: bool,
    cycle_log: Any = None,
) -> dict[str, Any]:
    """The leg's summary (written to DIR/summary.json) from its records; `cycle_log`:
    the burst cycle's bursts, in cycle mode."""
    if config.concurrency or config.cycle:
        duration = config.duration_s or 60.0
    else:
        duration = config.duration_s or (float(workload.arrival_s[-1]) if len(workload) else 0.0)
    extra: dict[str, Any] = {
        "label": config.label,
        "target": config.target,
        "model": config.model,
        "api": config.api,
        "stream": config.stream,
        "mode": "cycle" if config.cycle else "closed" if config.concurrency else "open",
        "concurrency": config.concurrency,
        "speedup": config.speedup,
        "workers": config.workers,
        "shard": list(config.shard),
        "retry": dataclasses.asdict(config.retry),
        "attempts": len(records) + sum(r.retries for r in records),
        "interrupted": interrupted,
        "workload": {"source": workload.source, **{k: v for k, v in workload.meta.items()}},
    }
    if config.prompt_pieces is not None:
        extra["prompt_text"] = config.prompt_pieces.describe()
    if cycle_log is not None:
        extra["cycle"] = cycle_log
    if poller is not None:
        series = poller.series()
        series["t"] = [t * config.speedup for t in series["t"]]
        extra["server_series"] = series
        extra["scrape_errors"] = poller.errors
        extra["prefix_cache"] = prefix_cache_from_series(series)
    summary = summarize(records, duration_s=duration, slo=config.slo, source="bench", extra=extra)
    summary["attempt_rate_rps"] = summary["attempts"] / max(duration, 1e-9)
    write_summary(config.out_dir / "summary.json", summary)
    return summary
