"""The local fleet decides at the policy's own times in engine seconds, whatever the
speedup: the times (and so the rate bins) the simulator's ticks have. Its scrapes of the
gateway once ran on a wall-clock period (0.5 s: one engine second at 2x, two at 4x), so
the decisions, and the arrival rates the predictive policy read, moved with the speedup."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from tests.conftest import BURSTGUARD, serve_app

from burstguard.core.scaling.config import ScalingPolicy
from burstguard.live.scaling.local_fleet import LocalFleet

BIN_S = 2.0
BURST_AT, BURST = 3.0, 10  # engine seconds, requests: one burst, inside the bin (2, 4]
# one replica whatever the rate: the test is about when the policy looks, not what it orders
POLICY = ScalingPolicy.model_validate(
    {"kind": "predictive", "cold_start": 8.0,
     "predictive": {"rate_per_replica": 100, "min_replicas": 1, "max_replicas": 1,
                    "bin_s": BIN_S, "trend_window_s": 20, "burst_window_s": 20,
                    "burst_quantile": 1.0}}
)  # fmt: skip


@pytest.mark.parametrize("speedup", [2.0, 8.0])
async def test_decisions_fall_on_the_policy_grid_in_engine_seconds(
    tmp_path: Path, speedup: float
) -> None:
    scrapes: list[float] = []
    fleet: LocalFleet | None = None

    async def metrics(_: web.Request) -> web.Response:
        assert fleet is not None
        now = fleet.now()
        scrapes.append(now)
        arrivals = BURST if now >= BURST_AT else 0
        return web.Response(text=f"burstguard_arrivals_total {arrivals}\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)

    def emulator(port: int) -> list[str]:
        return [*BURSTGUARD, "emulate", "--profile", "llama3-8b-h100", "--host", "127.0.0.1",
                "--port", str(port), "--speedup", str(speedup), "--max-num-seqs", "2"]  # fmt: skip

    async with serve_app(app) as gateway:
        fleet = LocalFleet(POLICY, tmp_path / "backends.txt", gateway, emulator, speedup=speedup)
        await fleet.run(duration_s=(5 * BIN_S + 1.0) / speedup)

    # the simulator ticks at 0, 2, ..., 10 engine seconds: so do the scrapes, each within
    # 50 ms of wall time (a timer's lateness on a busy machine) of its tick
    assert len(scrapes) == 6, scrapes
    for k, t in enumerate(scrapes):
        assert abs(t - k * BIN_S) <= 0.05 * speedup, scrapes
    # the burst is one bin's arrivals over exactly that bin's two engine seconds: each step
    # is taken at its due time (the timer's few milliseconds late do not reach the policy)
    assert fleet.controller.policy.gauges["forecast_rate"] == BURST / BIN_S
