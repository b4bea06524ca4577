"""A shared-prefix workload (`--shared-prefix`, `--prefix-groups`) hits an emulator's prefix
cache live as it hits the simulator's: the prompts bench renders share exactly the blocks
the workload says, and the emulator counts them with vLLM's own counters. Without sharing
the same load gives no hits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import BURSTGUARD, start_emulator

LOAD = ["--rate", "4", "--duration", "15", "--prompt-tokens", "128", "--output-tokens", "16"]


def run(*args: str) -> None:
    res = subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr


def hit_rates(tmp_path: Path, emulator: str, tag: str, *shape: str) -> tuple[float, float]:
    workload = tmp_path / f"{tag}.jsonl"
    run("generate", "poisson", *LOAD, *shape, "--out", str(workload))
    out = tmp_path / tag
    run("bench", "--quiet", "--target", emulator, "--workload", str(workload),
        "--speedup", "20", "--scrape-metrics", "--out", str(out))  # fmt: skip
    live = json.loads((out / "summary.json").read_text())["prefix_cache"]
    sim_json = tmp_path / f"{tag}-sim.json"
    run("sim", "--trace", str(workload), "--profile", "llama3-8b-h100",
        "--enable-prefix-caching", "--json", str(sim_json))  # fmt: skip
    sim = json.loads(sim_json.read_text())["prefix_cache"]
    return live["hit_rate"], sim["hit_rate"]


def test_shared_prefix_hits_live_as_in_the_sim(tmp_path: Path) -> None:
    proc = start_emulator(tmp_path, "--enable-prefix-caching")
    with proc:
        url = proc.base_url  # type: ignore[attr-defined]
        live, sim = hit_rates(
            tmp_path, url, "shared", "--shared-prefix", "512", "--prefix-groups", "3"
        )
        print(f"prefix-cache hit rate: live {live:.1%}, sim {sim:.1%}")
        assert sim > 0.5 and abs(live - sim) <= 0.03, (live, sim)
        alone, sim_alone = hit_rates(tmp_path, url, "alone")
        assert alone == sim_alone == 0.0, (alone, sim_alone)
