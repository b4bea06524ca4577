"""A records file written whole (`sim --records`) holds that run only."""

from __future__ import annotations

from pathlib import Path

from burstguard.wire.records import RequestRecord, read_records, write_records


def test_writing_records_again_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    write_records(path, [RequestRecord("a", 0.0), RequestRecord("b", 1.0)])
    write_records(path, [RequestRecord("c", 2.0)])
    assert [r.id for r in read_records(path)] == ["c"]
