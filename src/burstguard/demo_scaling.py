"""`make demo` step 6: reactive vs predictive scaling, live, on the same bursty workload.

For each policy (examples/scaling-demo-*.yaml): `burstguard fleet` starts emulator
replicas (4x speed, 4 slots each, so a replica is small and a burst needs more of them),
the gateway routes over the replicas the fleet lists in a watched file, and `burstguard
bench` plays the seed's burst pattern through the gateway. New replicas join only after
their simulated cold start (8 engine seconds). The table compares SLO attainment, TTFT
p95 and what the fleet cost (replica-seconds, engine time).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from burstguard.procs import ManagedProcess, free_port

SPEEDUP = 4.0
POLICIES = {
    "reactive (KEDA queue)": "examples/scaling-demo-reactive.yaml",
    "predictive": "examples/scaling-demo-predictive.yaml",
}
LOAD = ("--pattern", "burst", "--rate", "4", "--burst-size", "8-12", "--duration", "80",
        "--prompt-tokens", "256", "--output-tokens", "64", "--slo", "ttft=2,tpot=0.2")  # fmt: skip
CLI = [sys.executable, "-m", "burstguard.cli"]


def run_leg(name: str, policy: str, runs: Path, reports: Path) -> dict[str, Any]:
    """One policy: fleet, gateway, the burst through it; the bench summary and the books."""
    tag = "predictive" if "predictive" in name else "reactive"
    backends, books = runs / f"{tag}-backends.txt", runs / f"{tag}-fleet.json"
    backends.unlink(missing_ok=True)
    gw_port = free_port()
    gw_url = f"http://127.0.0.1:{gw_port}"
    fleet = subprocess.Popen(
        [*CLI, "fleet", "--policy", policy, "--gateway", gw_url, "--file", str(backends),
         "--max-num-seqs", "4", "--speedup", str(SPEEDUP), "--duration", "120",
         "--json", str(books), "--log-dir", str(reports / f"demo-scaling-{tag}")],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not backends.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        config = runs / f"{tag}-gateway.yaml"
        config.write_text(yaml.safe_dump({
            "engine_speedup": SPEEDUP,
            "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}],
            "fleet": {"discovery": {"file": {"path": str(backends), "interval_s": 0.25}}},
        }))  # fmt: skip
        gateway = ManagedProcess(
            [*CLI, "gateway", "--config", str(config), "--port", str(gw_port)],
            f"{gw_url}/health", log_path=reports / f"demo-scaling-{tag}-gateway.log",
        )  # fmt: skip
        out = runs / tag
        with gateway:
            subprocess.run(
                [*CLI, "bench", "--target", gw_url, *LOAD, "--speedup", str(SPEEDUP),
                 "--out", str(out), "--force", "--quiet"],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            # Stopped while its gateway still answers: the policy polls the gateway's
            # /metrics until the fleet has stopped, and would warn of a gateway gone first.
            fleet.terminate()  # stops its replicas and writes its books
            fleet.wait(timeout=60)
    finally:
        if fleet.poll() is None:
            fleet.terminate()
            fleet.wait(timeout=30)
    summary = json.loads((out / "summary.json").read_text())
    return {"summary": summary, "books": json.loads(books.read_text())}


def scaling_step(runs: Path, reports: Path) -> dict[str, dict[str, Any]]:
    runs.mkdir(parents=True, exist_ok=True)
    legs = {name: run_leg(name, policy, runs, reports) for name, policy in POLICIES.items()}
    print(f"{'':24} {'SLO':>7} {'TTFT p95':>9} {'replica-s':>10} {'max ready':>9} {'scalings':>8}")
    for name, leg in legs.items():
        s, b = leg["summary"], leg["books"]
        print(
            f"{name:24} {s['slo_attainment']:>7.1%} {s['ttft_s']['p95'] * 1000:>7.0f}ms "
            f"{b['replica_seconds']:>10.0f} {max(b['replicas']['ready']):>9} "
            f"{len(b['scale_events']):>8}",
            flush=True,
        )
    return legs
