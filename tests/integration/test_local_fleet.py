"""The scaling core live: `burstguard fleet` starts and stops real emulator processes as
replicas behind the real gateway (file discovery), each joining only after its simulated
cold start; the gateway runs a policy of its own and exports its decision and forecast."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import aiohttp
import yaml
from tests.conftest import BURSTGUARD, start_fleet_gateway

from burstguard.procs import free_port
from burstguard.scrape import metric_sum, parse_metrics

COLD_START_S = 3.0
# KPA with a tiny replica: 2 requests in flight each, one-second ticks, short windows
REACTIVE = {
    "kind": "kpa", "cold_start": COLD_START_S, "drain_timeout_s": 20,
    "kpa": {"target_concurrency": 2, "target_utilization": 1.0, "stable_window_s": 6,
            "panic_window_s": 2, "tick_interval_s": 1, "sample_interval_s": 0.5,
            "min_replicas": 1, "max_replicas": 3},
}  # fmt: skip


def lines(path: Path) -> list[str]:
    return [x for x in path.read_text().split("\n") if x.strip()] if path.exists() else []


async def load(base: str, clients: int, seconds: float) -> list[int]:
    """`clients` closed-loop users, each sending one short chat at a time."""
    body = {"model": "llama3-8b-h100", "max_tokens": 24,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    statuses: list[int] = []
    end = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:

        async def user() -> None:
            while time.monotonic() < end:
                async with session.post(f"{base}/v1/chat/completions", json=body) as r:
                    await r.read()
                    statuses.append(r.status)

        await asyncio.gather(*(user() for _ in range(clients)))
    return statuses


def test_local_fleet_scales_real_emulators_behind_the_gateway(tmp_path: Path) -> None:
    policy, backends, books = tmp_path / "kpa.yaml", tmp_path / "backends.txt", tmp_path / "b.json"
    policy.write_text(yaml.safe_dump(REACTIVE))
    gw_port = free_port()
    gw_url = f"http://127.0.0.1:{gw_port}"
    fleet = subprocess.Popen(
        [*BURSTGUARD, "fleet", "--policy", str(policy), "--gateway", gw_url, "--file",
         str(backends), "--max-num-seqs", "2", "--duration", "40", "--json", str(books),
         "--log-dir", str(tmp_path / "replicas")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not lines(backends) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(lines(backends)) == 1
        config = {
            "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 120.0}],
            "fleet": {"discovery": {"file": {"path": str(backends), "interval_s": 0.25}}},
            "autoscaler": {"policy": "predictive", "cold_start_s": COLD_START_S},
        }
        with start_fleet_gateway(tmp_path, [], config, port=gw_port):
            sizes: list[int] = []

            async def watched() -> list[int]:
                task = asyncio.ensure_future(load(gw_url, clients=6, seconds=12))
                while not task.done():
                    sizes.append(len(lines(backends)))
                    await asyncio.sleep(0.25)
                return await task

            statuses = asyncio.run(watched())
            with urllib.request.urlopen(f"{gw_url}/metrics", timeout=10) as resp:
                with_load = parse_metrics(resp.read().decode())
            deadline = time.monotonic() + 25  # after the load: drained back to the minimum
            while len(lines(backends)) > 1 and time.monotonic() < deadline:
                time.sleep(0.5)
            after = len(lines(backends))
        assert statuses and set(statuses) == {200}
        assert max(sizes) >= 2 and after == 1
        assert metric_sum(with_load, "burstguard_arrivals_total") == len(statuses)
        assert (metric_sum(with_load, "burstguard_desired_replicas") or 0) >= 1
        assert (metric_sum(with_load, "burstguard_autoscaler_forecast_rate") or 0) > 0
        routed = {k for k, v in with_load.items() if k.startswith("burstguard_backend_routed")
                  and v > 0}  # fmt: skip
        assert len(routed) >= 2
        out, _ = fleet.communicate(timeout=60)
        assert fleet.returncode == 0, out
        b = json.loads(books.read_text())
        reps, events = b["replicas"], b["scale_events"]
        first_up = next(e["t"] for e in events if e["desired"] > 1)
        more_ready = [t for t, r in zip(reps["t"], reps["ready"], strict=True) if r > 1]
        assert min(more_ready) >= first_up + COLD_START_S - 1e-6  # served after the cold start
        assert max(reps["draining"]) >= 1 and reps["ready"][-1] == 1
    finally:
        if fleet.poll() is None:
            fleet.kill()
            fleet.wait()
