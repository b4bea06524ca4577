"""The chaos run: minutes of bursts through 2 gateway replicas sharing a real Redis in front
of 3 emulators, while a seeded fault plan SIGKILLs and restarts engines, SIGSTOPs and
resumes them, restarts a gateway (SIGTERM drain) and kills and restarts Redis; then it
checks, from the clients' records, the gateways' logs and metrics, the engines' gauges and
Redis, that every try has one outcome and one log line, the totals add up per outcome,
nothing is left in flight, every 5xx is one the docs name for a fault under way, no stream
lost or doubled text, and the p99 wait on a stopped engine is bounded by the deadlines.
Prints the plan, the counts and the bounds; exits 1 if a check fails.

The harness is `tests/chaos.py` (the slow test `tests/integration/test_chaos.py` runs it
with a short plan). docs/gateway.md, "Chaos run".

Run it alone (it loads the machine): flock /work/notes/bench.lock .venv/bin/python
benchmarks/chaos.py [--duration 180] [--seed 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the `tests` package

from tests.chaos import ChaosConfig, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load")
    parser.add_argument("--seed", type=int, default=1, help="seeds the fault plan and the load")
    parser.add_argument("--no-deadlines", action="store_true",
                        help="backend_deadlines off: a stopped engine holds its clients "
                        "until resumed (the hung-wait check should then fail)")  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temp folder)")
    args = parser.parse_args()
    if args.duration < 20:
        parser.error("--duration must be at least 20 s (the plan needs room for its faults)")
    cfg = ChaosConfig(duration_s=args.duration, seed=args.seed, deadlines=not args.no_deadlines)
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        report = asyncio.run(run_chaos(cfg, workdir))
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
