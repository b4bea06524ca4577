"""One schedule from several machines: `bench --shard K/N --start-at T` on N processes sends
exactly the schedule one client would, and `report` / `compare` merge the shard runs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import BURSTGUARD

from burstguard.wire.records import read_records
from burstguard.wire.summary import merge_shards

LOAD = [
    "--pattern",
    "poisson",
    "--rate",
    "20",
    "--duration",
    "4",
    "--seed",
    "7",
    "--prompt-tokens",
    "32",
    "--output-tokens",
    "4",
    "--speedup",
    "20",
]


def test_three_shards_send_the_one_schedule(emulator: str, tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    one = subprocess.run(
        [*BURSTGUARD, "bench", "--quiet", "--target", emulator, *LOAD, "--out", str(whole)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one.returncode == 0, one.stderr
    start = time.time() + 20  # three processes start and check the target first (slow when loaded)
    runs = tmp_path / "sharded"
    procs = [
        subprocess.Popen(
            [
                *BURSTGUARD,
                "bench",
                "--quiet",
                "--target",
                emulator,
                *LOAD,
                "--shard",
                f"{k}/3",
                "--start-at",
                f"{start:.3f}",
                "--out",
                str(runs / f"shard-{k}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    sizes = [len(list(read_records(runs / f"shard-{k}" / "records.jsonl"))) for k in range(3)]
    reference = sorted((r.id, r.scheduled_s) for r in read_records(whole / "records.jsonl"))
    assert min(sizes) > 0 and sum(sizes) == len(reference)
    report = tmp_path / "sharded.html"
    out = subprocess.run(
        [*BURSTGUARD, "report", str(runs), "--out", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    gate = subprocess.run(
        [*BURSTGUARD, "compare", str(whole), str(runs), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gate.returncode in (0, 1), gate.stderr  # a verdict, whichever it is
    merged, records = merge_shards(
        [
            (
                json.loads((runs / f"shard-{k}" / "summary.json").read_text()),
                list(read_records(runs / f"shard-{k}" / "records.jsonl")),
            )
            for k in range(3)
        ]
    )
    assert sorted((r.id, r.scheduled_s) for r in records) == reference
    assert merged["requests"] == len(reference) and merged["shards"] == 3


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    summary = {"shard": [0, 3], "duration_s": 1.0, "source": "bench", "slo": {}}
    with pytest.raises(ValueError, match="1/3, 2/3 are missing"):
        merge_shards([(summary, [])])


def test_shard_needs_a_shared_start(emulator: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [
            *BURSTGUARD,
            "bench",
            "--target",
            emulator,
            *LOAD,
            "--shard",
            "1/2",
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "--start-at" in res.stderr, res.stderr
