"""The chaos run, short: 45 s of bursts through 2 gateways sharing a real Redis in front of
3 emulators, under a seeded plan that kills and stops engines, restarts a gateway and
kills Redis (each kind at least once); every check of `tests/chaos.py` must pass
(`benchmarks/chaos.py` is the same run for minutes; docs/gateway.md, "Chaos run")."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tests.chaos import ChaosConfig, fault_plan, run_chaos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_a_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (make system-deps)")
        pytest.skip("redis-server is not installed: run `make system-deps` as root")
    cfg = ChaosConfig(duration_s=45.0, seed=1)
    plan = fault_plan(cfg.duration_s, cfg.seed)
    kinds = {f.kind for f in plan}
    assert kinds == {"engine_kill", "engine_stop", "gateway_restart", "redis_kill"}, plan
    report = await run_chaos(cfg, tmp_path, plan)
    print("\n" + report.text())
    assert len(report.done) == len(plan), "every fault was injected"
    assert report.figures["tries"] >= 150
    assert report.figures["hung_waits_stream"]["n"] > 0, "a stream was on a stopped engine"
    assert report.ok, "\n".join(f"{c.name}: {c.detail}" for c in report.checks if not c.ok)
