"""Fidelity: the same workloads, by the same client, on a real engine and on the emulator
with a calibrated profile; p50/p95 TTFT and E2E side by side with their relative error.

Used by tests/integration/test_vllm.py (asserting a bound) and benchmarks/fidelity.py
(regenerating the table in docs/fidelity.md).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burstguard.errors import TargetError
from burstguard.wire.summary import read_summary

SHAPE = ("--prompt-tokens", "60", "--output-tokens", "32")  # for the patterns
AZURE_CODE = Path(__file__).resolve().parents[3] / "examples" / "traces" / "azure2023_code.csv"
# name -> bench arguments: Poisson and the burst pattern, each at two load levels, and the
# first 48 s of the Azure code trace (63 requests, 36 of them within 12 s) with prompts
# scaled to this engine (median 1469 -> 59 tokens), outputs as recorded (median 13)
WORKLOADS: dict[str, tuple[str, ...]] = {
    "poisson 0.75 req/s": ("--pattern", "poisson", "--rate", "0.75", "--seed", "3"),
    "poisson 1.5 req/s": ("--pattern", "poisson", "--rate", "1.5", "--seed", "4"),
    "bursts of 12 / 12 s": ("--pattern", "burst", "--burst-size", "12-12", "--idle", "12-12"),
    "bursts of 24 / 16 s": ("--pattern", "burst", "--burst-size", "24-24", "--idle", "16-16"),
    "azure code 0-48 s, prompts x0.04": (
        "--workload", str(AZURE_CODE), "--window", "0-48", "--prompt-scale", "0.04",
    ),
}  # fmt: skip
METRICS = (("ttft_s", "p50"), ("ttft_s", "p95"), ("e2e_s", "p50"), ("e2e_s", "p95"))


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    metric: str  # e.g. "ttft p95"
    real_s: float  # the median over the real runs
    emulated_s: float
    real_range: tuple[float, float] | None = None  # lowest and highest real run (> 1 run)

    @property
    def rel_error(self) -> float:
        return self.emulated_s / self.real_s - 1


def _bench(
    target: str, out: Path, args: tuple[str, ...], duration_s: float, speedup: float
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "burstguard.cli", "bench", "--quiet", "--target", target,
           *args, *SHAPE, "--duration", str(duration_s), "--speedup", str(speedup),
           "--out", str(out), "--force"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    if res.returncode != 0:
        raise TargetError(f"bench against {target} failed: {res.stderr[-500:]}")
    return read_summary(out / "summary.json")


Legs = dict[str, dict[str, Any]]
"""workload name -> its bench summary."""


def run_legs(
    target: str, workdir: Path, tag: str, *, duration_s: float = 36.0, speedup: float = 1.0,
    workloads: dict[str, tuple[str, ...]] = WORKLOADS,
) -> Legs:  # fmt: skip
    """Every workload once on `target`, by the same client (DIR/<i>-<tag>)."""
    return {name: _bench(target, workdir / f"{i}-{tag}", args, duration_s, speedup)
            for i, (name, args) in enumerate(workloads.items())}  # fmt: skip


def pair_up(real_runs: list[Legs], emulated: Legs) -> list[Row]:
    """The emulator's percentiles beside the real engine's: with several real runs (each
    on a fresh server: a repeated workload would hit its prefix cache), beside their
    median, with their range (the real engine's own run-to-run spread)."""
    rows = []
    for name, e in emulated.items():
        for key, q in METRICS:
            real = [run[name][key][q] for run in real_runs]
            spread = (min(real), max(real)) if len(real) > 1 else None
            rows.append(Row(name, f"{key.split('_')[0]} {q}", statistics.median(real),
                            e[key][q], spread))  # fmt: skip
    return rows


def compare_legs(
    real: str, emulated: str, workdir: Path, *, duration_s: float = 36.0,
    emulator_speedup: float = 1.0, workloads: dict[str, tuple[str, ...]] = WORKLOADS,
) -> list[Row]:  # fmt: skip
    """Runs every workload on both targets (real first, each in turn, so both legs of a
    workload meet the same machine) and pairs up their percentiles."""
    real_legs: Legs = {}
    emulated_legs: Legs = {}
    for i, (name, args) in enumerate(workloads.items()):
        real_legs[name] = _bench(real, workdir / f"{i}-real", args, duration_s, 1.0)
        emulated_legs[name] = _bench(emulated, workdir / f"{i}-emulated", args, duration_s,
                                     emulator_speedup)  # fmt: skip
    return pair_up([real_legs], emulated_legs)


def markdown(rows: list[Row]) -> str:
    ranged = any(r.real_range is not None for r in rows)
    head = "| workload | metric | real vLLM | emulator | error |"
    if ranged:
        head = "| workload | metric | real vLLM (median) | real runs (range) | emulator | error |"
    lines = [head, "|---" * head.count(" | ") + "|---|"]
    for r in rows:
        spread = "" if r.real_range is None else (
            f" {r.real_range[0]:.3f}-{r.real_range[1]:.3f} s |")  # fmt: skip
        lines.append(f"| {r.workload} | {r.metric} | {r.real_s:.3f} s |{spread} "
                     f"{r.emulated_s:.3f} s | {r.rel_error:+.0%} |")  # fmt: skip
    return "\n".join(lines)
