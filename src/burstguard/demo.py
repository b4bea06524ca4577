"""`make demo`: the seed's finding, shown end to end on burstguard's embedded engine model.

1. analyze a real trace (the Azure code trace shipped in examples/): how bursty is it?
2. replay steady (Poisson) and the seed's burst pattern at the same mean request rate on
   the vLLM-like engine model (llama3-8b-h100, max-num-seqs 64) in virtual time;
3. judge burst against steady with the seed's rules (`burstguard compare`) and write
   reports/demo.html.
The mean rate is matched by construction: both legs are generated with the same --rate,
and the burst pattern's idle range is scaled so its mean rate equals it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from burstguard.bench.compare import Thresholds
from burstguard.report.cli import run_compare
from burstguard.report.html import write_compare_report
from burstguard.report.table import print_verdict

RATE_RPS = 6.0
DURATION_S = 300
SHAPE = ["--prompt-tokens", "1024", "--output-tokens", "256"]
ENGINE = ["--profile", "llama3-8b-h100", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192"]


def _burstguard(*args: str) -> None:
    cmd = [sys.executable, "-m", "burstguard.cli", *args]
    print("$ burstguard " + " ".join(args), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit(f"demo step failed: burstguard {' '.join(args)}")


def main() -> int:
    root = Path.cwd()
    reports, runs = root / "reports", root / "runs" / "demo"
    reports.mkdir(exist_ok=True)
    _burstguard(
        "analyze", "examples/traces/azure2023_code.csv", "--plot", str(reports / "azure_code.png")
    )
    for leg, pattern in (("steady", "poisson"), ("burst", "burst")):
        out = runs / leg
        out.mkdir(parents=True, exist_ok=True)
        _burstguard(
            "sim", "--pattern", pattern, "--rate", str(RATE_RPS), "--duration", str(DURATION_S),
            "--seed", "1", *SHAPE, *ENGINE,
            "--json", str(out / "summary.json"), "--records", str(out / "records.jsonl"),
        )  # fmt: skip
    verdict, legs = run_compare(runs / "steady", runs / "burst", Thresholds())
    print_verdict(verdict, title=f"steady (Poisson) vs seed bursts at {RATE_RPS:g} req/s")
    write_compare_report(legs, verdict, reports / "demo.html")
    print(f"report written to {reports / 'demo.html'}")
    print("verdict:", "PASS" if verdict.passed else "FAIL — bursts break this deployment's SLO")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
