"""Per-request result records: one schema for bench (real clock) and sim (virtual clock).

Format `burstguard.record/1`, one JSON object per line (see docs/formats.md).
Times are seconds; `scheduled_s` and `sent_s` are relative to the run's start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

RECORD_SCHEMA = "burstguard.record/1"


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. `error` is None on success, else a kind:
    `http_<status>`, `timeout`, `connection_refused`, `stream_broken`, `cancelled`,
    `rejected` (sim/gateway shed)."""

    id: str
    scheduled_s: float
    sent_s: float | None = None
    status: int | None = None
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    queue_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    priority_class: str | None = None
    tenant: str | None = None
    retries: int = 0
    retry_after_s: float | None = None
    error_code: str | None = None  # the last answer's OpenAI error `code` (quota_exceeded, ...)
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (tokens - 1): time per output token after the first."""
        if self.ttft_s is None or self.e2e_s is None or not self.completion_tokens:
            return None
        if self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    def to_json(self) -> str:
        # field by field: dataclasses.asdict deep-copies and is the bench's hot spot
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["tpot_s"] = self.tpot_s
        data["schema"] = RECORD_SCHEMA
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


FLUSH_EVERY_S = 0.2


class RecordWriter:
    """Appends records as JSONL, flushed at least every FLUSH_EVERY_S and on close: a run
    stopped by a signal loses nothing, a killed one at most that much, and a fast open loop
    does not pay a write system call per request."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = path.open("a", encoding="utf-8")
        self._flushed = time.monotonic()

    def write(self, record: RequestRecord) -> None:
        self._fh.write(record.to_json() + "\n")
        now = time.monotonic()
        if now - self._flushed >= FLUSH_EVERY_S:
            self._fh.flush()
            self._flushed = now

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    """`records` as the whole of `path` (what it held is replaced: `sim --records` run
    twice into one file appended the second run to the first)."""
    path.unlink(missing_ok=True)
    with RecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def read_records(path: Path) -> Iterator[RequestRecord]:
    """Reads a records file; a malformed line raises ValueError naming file and line."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield RequestRecord.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a burstguard record: {exc}") from exc
