"""The seed's closed burst cycle in bench, against the emulator: a burst at once, the next
only after every request of it has finished and its idle gap has passed."""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from tests.conftest import BURSTGUARD, start_emulator

from burstguard.wire.records import read_records
from burstguard.wire.summary import read_summary

pytestmark = pytest.mark.timeout(200)

SLACK_S = 0.5  # target seconds (0.05 s of wall time at --speedup 10) of client overhead


def test_each_burst_waits_for_the_last_to_finish_and_idles(tmp_path: Path) -> None:
    out = tmp_path / "cycle"
    # 3 slots: each burst takes seconds of target time to drain, so a cycle that counted
    # its idle gap from the burst's start (open loop) would overlap the next burst
    with start_emulator(tmp_path, "--max-num-seqs", "3", speedup=10.0) as proc:
        res = subprocess.run(
            [*BURSTGUARD, "bench", "--quiet", "--target", proc.base_url,  # type: ignore[attr-defined]
             "--burst-cycle", "--burst-size", "15-30", "--idle", "5-15", "--duration", "60",
             "--prompt-tokens", "128", "--output-tokens", "64", "--speedup", "10",
             "--out", str(out)],
            capture_output=True, text=True, timeout=180, env={**os.environ, "CI": "true"},
        )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = read_summary(out / "summary.json")
    assert summary["mode"] == "cycle" and summary["errors"] == 0
    bursts: dict[int, list] = defaultdict(list)
    for r in read_records(out / "records.jsonl"):
        bursts[int(r.id[1:].split("-")[0])].append(r)
    log = summary["cycle"]
    assert len(bursts) == len(log) >= 3
    for k in range(len(log)):
        sent = [r.sent_s for r in bursts[k]]
        ends = [r.sent_s + r.e2e_s for r in bursts[k]]
        assert 15 <= len(bursts[k]) == log[k]["size"] <= 30
        assert max(sent) - min(sent) < SLACK_S  # a burst goes out at once
        assert 5.0 <= log[k]["idle_s"] <= 15.0
        assert max(ends) - SLACK_S <= log[k]["finished_s"] <= max(ends) + SLACK_S
        assert max(ends) - min(sent) > 1.0  # 3 slots: the burst took a while to drain
        if k + 1 < len(log):
            next_start = min(r.sent_s for r in bursts[k + 1])
            gap = next_start - max(ends)  # idle counted from the burst's end
            assert log[k]["idle_s"] - SLACK_S <= gap <= log[k]["idle_s"] + SLACK_S
