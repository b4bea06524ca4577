"""`burstguard sim --gateway --replicas N`: replicas behind the core's router, added and
drained while the simulation runs (the API an autoscaler drives)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from tests.conftest import BURSTGUARD, REPO_ROOT

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.events import Release
from burstguard.sim.gateway_loop import _GatewaySim, simulate_gateway
from burstguard.sim.replicas import replica_id
from burstguard.wire.records import RequestRecord
from burstguard.workload.spec import RequestSpec, Workload

H100 = Profile.load("llama3-8b-h100")
ENGINE = EngineConfig(max_num_seqs=16)
EXAMPLE = REPO_ROOT / "examples" / "gateway.yaml"


def steady(n: int = 400, rate: float = 20.0, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    t, specs = 0.0, []
    for k in range(n):
        t += rng.exponential(1 / rate)
        specs.append(RequestSpec(f"r{k}", t, int(rng.integers(100, 600)), 64))
    return Workload.from_specs(specs)


def test_requests_spread_over_replicas_and_all_complete() -> None:
    res = simulate_gateway(steady(), ENGINE, H100, GatewayConfig(), replicas=3)
    assert all(r.ok for r in res.records)
    # named as the live gateway names 3 `--backend`s (core.fleet.names), not by URL
    assert res.routed is not None and set(res.routed) == {f"backend-{i}" for i in range(3)}
    shares = [n / 400 for n in res.routed.values()]
    assert all(0.2 < s < 0.47 for s in shares), shares


def test_a_replica_added_mid_run_takes_requests_and_a_drained_one_takes_none() -> None:
    wl = steady()
    drained: list[float] = []
    sent_after: list[str] = []

    class Spy(_GatewaySim):  # (compiled by mypyc, it can be subclassed, not patched)
        def release(self, effect: Release, rec: RequestRecord, now: float) -> None:
            if now > 5.0:
                sent_after.append(effect.backend)
            super().release(effect, rec, now)

    sim = Spy(wl, ENGINE, H100, GatewayConfig(), replicas=2)
    sim.heap.at(5.0, 1, lambda t: sim.replicas.add_replica("http://replica-new", t))
    sim.heap.at(5.0, 1, lambda t: sim.replicas.drain_replica(replica_id(0), t, drained.append))
    res = sim.run()
    assert all(r.ok for r in res.records)
    assert "http://replica-new" in sent_after and replica_id(0) not in sent_after
    assert len(drained) == 1 and 5.0 <= drained[0] < 10.0  # its last request finished
    assert sim.replicas.replicas == (replica_id(1), "http://replica-new")
    assert sim.replicas.draining == ()


def test_cli_replicas_needs_a_gateway_and_prints_the_shares(tmp_path: Path) -> None:
    sim = [*BURSTGUARD, "sim", "--pattern", "poisson", "--rate", "20", "--duration", "10",
           "--max-num-seqs", "16"]  # fmt: skip
    res = subprocess.run([*sim, "--replicas", "3"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--replicas: needs --gateway" in res.stderr + res.stdout
    out = tmp_path / "s.json"
    argv = [*sim, "--replicas", "3", "--gateway", str(EXAMPLE), "--json", str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "routed: backend-0" in res.stdout and "http://" not in res.stdout
    routed = json.loads(out.read_text())["gateway"]["routed"]
    assert sorted(routed) == [f"backend-{i}" for i in range(3)]


def test_a_large_fleet_routed_line_names_the_busiest_and_sums_the_rest() -> None:
    from burstguard.sim.cli import routed_line

    small = {"backend-0": 3, "backend-1": 1}
    assert routed_line(small) == "backend-0 3 (75.0%), backend-1 1 (25.0%)"
    fleet = {f"backend-{i}": i for i in range(20)}
    line = routed_line(fleet)
    assert line.startswith("backend-19 19 (10.0%), backend-18 18")
    assert line.endswith("12 more replicas 66 (34.7%)") and "backend-11" not in line
