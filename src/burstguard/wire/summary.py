"""The run summary (`burstguard.summary/1`): one schema for bench and sim.

compare, reports and CI gates read it; docs/formats.md documents every key.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from burstguard.wire.records import RequestRecord

SUMMARY_SCHEMA = "burstguard.summary/1"
STAT_KEYS = ("mean", "p50", "p90", "p95", "p99", "max")


@dataclass(frozen=True, slots=True)
class Slo:
    """A latency target; a request attains it when it completed within both bounds."""

    ttft_s: float = 0.5
    tpot_s: float = 0.05

    @classmethod
    def parse(cls, text: str) -> Slo:
        """Parses `ttft=0.5,tpot=0.05` (seconds); raises ValueError with a clear message."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in ("ttft", "tpot"):
                raise ValueError(f"bad SLO term {part!r}: expected ttft=SECONDS or tpot=SECONDS")
            try:
                values[f"{key}_s"] = float(value)
            except ValueError:
                raise ValueError(f"bad SLO value in {part!r}: not a number") from None
            if values[f"{key}_s"] <= 0:
                raise ValueError(f"bad SLO value in {part!r}: must be > 0")
        return cls(**values)

    def met(self, record: RequestRecord) -> bool:
        if not record.ok or record.ttft_s is None or record.ttft_s > self.ttft_s:
            return False
        tpot = record.tpot_s
        return tpot is None or tpot <= self.tpot_s


def stats(values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """mean / p50 / p90 / p95 / p99 / max; all None when there is no value."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return dict.fromkeys(STAT_KEYS)
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return {
        "mean": float(arr.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(arr.max()),
    }


def _token_gaps(records: Sequence[RequestRecord]) -> np.ndarray:
    """Every record's inter-token gaps in one array, filled in place (a day's 221M)."""
    n = sum(len(r.itl_s) for r in records)
    gaps = itertools.chain.from_iterable(r.itl_s for r in records)
    return np.fromiter(gaps, dtype=np.float64, count=n)


def _latency_block(records: Sequence[RequestRecord], slo: Slo) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    met = sum(1 for r in records if slo.met(r))
    return {
        "requests": len(records),
        "completed": len(ok),
        "ttft_s": stats([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_s": stats([t for r in ok if (t := r.tpot_s) is not None]),
        "e2e_s": stats([r.e2e_s for r in ok if r.e2e_s is not None]),
        "slo_attainment": met / len(records) if records else None,
    }


def per_second_series(records: Sequence[RequestRecord], duration_s: float) -> dict[str, list]:
    """Per-second bins: offered (scheduled), started (sent), completed, in flight at the
    bin's end, errors (by end time), and p95 TTFT of requests sent in the bin."""
    ends = [(r.sent_s or r.scheduled_s) + (r.e2e_s or 0.0) for r in records if r.sent_s is not None]
    horizon = max([duration_s, *ends, *(r.scheduled_s for r in records)], default=0.0)
    n = max(1, math.ceil(horizon))
    edges = np.arange(n + 1, dtype=np.float64)

    def hist(values: list[float]) -> list[int]:
        return np.histogram(np.asarray(values, dtype=np.float64), bins=edges)[0].tolist()

    sent = [r.sent_s for r in records if r.sent_s is not None]
    done_ok = [r.sent_s + (r.e2e_s or 0.0) for r in records if r.ok and r.sent_s is not None]
    errors = [
        (r.sent_s if r.sent_s is not None else r.scheduled_s) + (r.e2e_s or 0.0)
        for r in records
        if not r.ok
    ]
    started = np.cumsum(hist(sent))
    finished = np.cumsum(hist(ends))
    ttft_p95: list[float | None] = []
    buckets: list[list[float]] = [[] for _ in range(n)]
    for r in records:
        if r.ok and r.sent_s is not None and r.ttft_s is not None:
            buckets[min(n - 1, int(r.sent_s))].append(r.ttft_s)
    for bucket in buckets:
        ttft_p95.append(float(np.percentile(bucket, 95)) if bucket else None)
    return {
        "t": edges[:-1].tolist(),
        "offered": hist([r.scheduled_s for r in records]),
        "started": hist(sent),
        "completed": hist(done_ok),
        "in_flight": (started - finished).tolist(),
        "errors": hist(errors),
        "ttft_p95": ttft_p95,
    }


PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


def prefix_cache_block(queried_tokens: int, hit_tokens: int) -> dict[str, Any]:
    """The summary's `prefix_cache`: prompt tokens looked up in the engines' prefix caches,
    those found there, and their ratio (None when nothing was looked up)."""
    rate = hit_tokens / queried_tokens if queried_tokens else None
    return {"queried_tokens": queried_tokens, "hit_tokens": hit_tokens, "hit_rate": rate}


def prefix_cache_from_series(series: dict[str, Any]) -> dict[str, Any] | None:
    """`prefix_cache` from a scraped engine's own counters (vLLM's prefix_cache_queries and
    _hits, the emulator's alike) over the run: last minus first scrape; None where the
    target exports no such counters (a gateway, an engine without prefix caching)."""
    queries = [v for v in series.get(PREFIX_QUERIES, ()) if v is not None]
    hits = [v for v in series.get(PREFIX_HITS, ()) if v is not None]
    if not queries or not hits:
        return None
    return prefix_cache_block(int(queries[-1] - queries[0]), int(hits[-1] - hits[0]))


def summarize(
    records: Sequence[RequestRecord],
    *,
    duration_s: float,
    slo: Slo | None = None,
    source: str = "bench",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Builds the summary dict. `duration_s` is the length of the offered schedule
    (or the closed-loop run); rates divide by it."""
    slo = slo or Slo()
    ok = [r for r in records if r.ok]
    outcomes: dict[str, int] = {}
    for r in records:
        key = "ok" if r.ok else (r.error or "incomplete")
        outcomes[key] = outcomes.get(key, 0) + 1
    span = max(duration_s, 1e-9)
    last_end = max(
        ((r.sent_s or 0.0) + (r.e2e_s or 0.0) for r in ok if r.sent_s is not None), default=0.0
    )
    wall = max(span, last_end)
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)
    met = sum(1 for r in records if slo.met(r))
    by_class: dict[str, Any] = {}
    classes = sorted({r.priority_class for r in records if r.priority_class is not None})
    for cls in classes:
        by_class[cls] = _latency_block([r for r in records if r.priority_class == cls], slo)
    summary: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "source": source,
        "requests": len(records),
        "completed": len(ok),
        "errors": len(records) - len(ok),
        "outcomes": outcomes,
        "duration_s": duration_s,
        "wall_s": wall,
        "offered_rate_rps": len(records) / span,
        "achieved_rate_rps": len(ok) / wall,
        "output_tokens_per_s": out_tokens / wall,
        "input_tokens_per_s": in_tokens / wall,
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "ttft_s": stats([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_s": stats([t for r in ok if (t := r.tpot_s) is not None]),
        "itl_s": stats(_token_gaps(ok)),
        "e2e_s": stats([r.e2e_s for r in ok if r.e2e_s is not None]),
        "queue_s": stats([r.queue_s for r in ok if r.queue_s is not None]),
        "schedule_lag_s": stats(
            [r.sent_s - r.scheduled_s for r in records if r.sent_s is not None]
        ),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "slo_attainment": met / len(records) if records else None,
        "goodput_rps": met / wall,
        "retries": sum(r.retries for r in records),
        "by_class": by_class,
        "series": per_second_series(records, duration_s),
    }
    if extra:
        summary.update(extra)
    return summary


def merge_shards(
    shards: Sequence[tuple[dict[str, Any], Sequence[RequestRecord]]],
) -> tuple[dict[str, Any], list[RequestRecord]]:
    """The runs of `bench --shard K/N` (all N of one schedule, each its summary and records)
    as the one run a single client would have written: records in schedule order, every
    figure computed again over all of them; the rest (target, series) from shard 0.
    Raises ValueError naming the shards missing or repeated."""
    if not shards:
        raise ValueError("no shard runs to merge")
    by_k: dict[int, tuple[dict[str, Any], Sequence[RequestRecord]]] = {}
    n = None
    for summary, records in shards:
        k, of = summary.get("shard", (0, 1))
        if n is not None and of != n:
            raise ValueError(f"shards of different splits: /{n} and /{of}")
        if k in by_k:
            raise ValueError(f"shard {k}/{of} appears twice")
        n, by_k[k] = of, (summary, records)
    assert n is not None
    missing = sorted(set(range(n)) - set(by_k))
    if missing:
        raise ValueError(f"shards {', '.join(f'{k}/{n}' for k in missing)} are missing")
    first = by_k[0][0]
    merged = sorted((r for _, rs in by_k.values() for r in rs), key=lambda r: r.scheduled_s)
    slo = Slo(**first["slo"]) if isinstance(first.get("slo"), dict) else Slo()
    fresh = summarize(merged, duration_s=first["duration_s"], slo=slo, source=first["source"])
    attempts = sum(int(s.get("attempts", len(rs))) for s, rs in by_k.values())
    out = {**{k: v for k, v in first.items() if k not in fresh}, **fresh}
    out.update(shard=[0, 1], shards=n, attempts=attempts,
               attempt_rate_rps=attempts / max(fresh["duration_s"], 1e-9))  # fmt: skip
    return out, merged


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def read_summary(path: Path) -> dict[str, Any]:
    """Reads a summary; raises ValueError with the path when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SUMMARY_SCHEMA:
        raise ValueError(f"{path}: not a burstguard summary (expected schema {SUMMARY_SCHEMA})")
    return data
