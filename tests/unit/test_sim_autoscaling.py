"""`burstguard sim --autoscaler`: the policy core scales fleetwire's ReplicaSet in virtual
time; replicas serve only after their cold start, scaled-down ones drain, and the summary
carries the cost, the replicas series and the scale events."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import BURSTGUARD

from burstguard.autoscale import ScalingPolicy, load_policy
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.report.fleet_plot import fleet_figure
from burstguard.sim.defaults import fleet_gateway
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import RequestSpec, Workload

H100 = Profile.load("llama3-8b-h100")
COLD_START_S = 20.0


def stepped(seed: int = 1) -> Workload:
    """10 req/s for 60 s, a 60 s surge at 100 req/s (3 replicas' worth), 3 req/s for 480 s
    (longer than the 300 s scale-down window of keda-queue)."""
    rng = np.random.default_rng(seed)
    specs, t = [], 0.0
    for end, rate in ((60.0, 10.0), (120.0, 100.0), (600.0, 3.0)):
        while (t := t + rng.exponential(1 / rate)) < end:
            specs.append(RequestSpec(f"r{len(specs)}", t, 512, 128))
        t = end
    return Workload.from_specs(specs)


def run(policy: str, **overrides: float | int) -> dict:  # type: ignore[type-arg]
    scaling = load_policy(policy).with_overrides(cold_start_s=COLD_START_S, **overrides)
    res = simulate_gateway(
        stepped(), EngineConfig(), H100, fleet_gateway(scaling.max_replicas), 1, scaling=scaling
    )
    assert res.scaling is not None
    return {"result": res, **res.scaling}


def _integral(series: dict, end: float) -> float:  # type: ignore[type-arg]
    t = [*series["t"], end]
    counts = zip(series["starting"], series["ready"], series["draining"], strict=True)
    alive = [s + r + d for s, r, d in counts]
    return sum(n * (b - a) for n, a, b in zip(alive, t, t[1:], strict=False))


@pytest.mark.parametrize("policy", ["keda-queue", "kpa", "predictive"])
def test_the_policy_scales_up_for_the_surge_after_a_cold_start_and_back_down(policy: str) -> None:
    out = run(policy, min_replicas=1, max_replicas=6)
    reps, events = out["replicas"], out["scale_events"]
    assert events and events[0]["desired"] > 1 and 60.0 <= events[0]["t"] < 120.0
    first_up = events[0]["t"]
    # no replica serves before its cold start has passed
    more_ready = [t for t, r in zip(reps["t"], reps["ready"], strict=True) if r > 1]
    assert more_ready and min(more_ready) >= first_up + COLD_START_S - 1e-9
    assert max(reps["ready"]) >= 2
    assert reps["ready"][-1] + reps["starting"][-1] < max(reps["ready"])  # scaled back down
    assert max(reps["draining"]) >= 1
    # every request routed to a replica that was drained still completed
    res = out["result"]
    assert sum(1 for r in res.records if r.ok) == len(res.records) - sum(
        1 for r in res.records if r.status == 429
    )
    assert len(res.routed) == len(set(res.routed)) >= 2
    assert out["replica_seconds"] == pytest.approx(_integral(reps, res.end_s), rel=1e-9)


def test_more_replicas_met_more_of_the_slo_than_one() -> None:
    one = simulate_gateway(stepped(), EngineConfig(), H100, fleet_gateway(6), 1)
    scaled = run("kpa", min_replicas=1, max_replicas=6)["result"]

    def met(records: list) -> int:  # type: ignore[type-arg]
        return sum(1 for r in records if r.ok and r.ttft_s is not None and r.ttft_s <= 0.5)

    assert met(scaled.records) > met(one.records) * 1.05


def test_sim_cli_writes_the_fleet_summary(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    proc = subprocess.run(
        [*BURSTGUARD, "sim", "--pattern", "burst", "--rate", "60", "--duration", "60",
         "--autoscaler", "kpa", "--min-replicas", "1", "--max-replicas", "4",
         "--cold-start-s", "10", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "replica-seconds" in proc.stdout
    s = json.loads(out.read_text())
    assert s["replica_seconds"] > 60 and s["autoscaler"]["kind"] == "kpa"
    assert set(s["replicas"]) == {"t", "desired", "starting", "ready", "draining"}
    assert s["scale_events"] and {"t", "desired", "reason"} <= set(s["scale_events"][0])
    assert len(s["queue_depth"]["t"]) >= 60
    fig = fleet_figure([("kpa", s, [])])
    assert fig is not None and fleet_figure([("plain", {"series": s["series"]}, [])]) is None
    names = {tr.name: tr for tr in fig.data}
    assert {"kpa: arrivals", "kpa: desired", "kpa: ready", "kpa: queue", "kpa: TTFT p95"} <= set(
        names
    )
    assert list(names["kpa: ready"].y[:-1]) == s["replicas"]["ready"]
    assert {tr.xaxis for tr in fig.data} == {"x", "x2", "x3", "x4"}  # four rows, one time axis
    assert fig.layout.xaxis.matches == "x4" or fig.layout.xaxis2.matches == "x4"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--min-replicas", "2"], "need --autoscaler"),
        (["--autoscaler", "nope"], "nope"),
        (["--autoscaler", "kpa", "--replicas", "9", "--max-replicas", "4"], "outside"),
        (["--autoscaler", "kpa", "--cold-start-s", "-1"], "--cold-start-s"),
    ],
)
def test_sim_refuses_bad_scaling_flags(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [*BURSTGUARD, "sim", "--pattern", "poisson", "--rate", "2", "--duration", "5", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_a_cap_shrunk_while_one_replica_was_overloaded_is_lifted_when_the_fleet_grows() -> None:
    """The gateway-wide in-flight cap adapts from the only backend; once a scale-up adds
    replicas only their own caps adapt, so the shrunk global one must not stay shrunk
    (it did: 16 replicas then served a burst through one replica's cap)."""
    from burstguard.sim.gateway_loop import _GatewaySim
    from burstguard.sim.replicas import replica_id

    gateway = fleet_gateway(4)
    sim = _GatewaySim(stepped(), EngineConfig(max_num_seqs=8), H100, gateway, replicas=1)
    caps: list[float] = []
    sim.heap.at(110.0, 1, lambda t: caps.append(sim.gw.stats.limit_requests))
    for k in (1, 2, 3):
        sim.heap.at(110.0, 1, lambda t, k=k: sim.replicas.add_replica(replica_id(k), t))
    sim.heap.at(112.0, 1, lambda t: caps.append(sim.gw.stats.limit_requests))
    sim.run()
    assert caps[0] < gateway.admission.max_in_flight  # shrunk by the overloaded replica
    assert caps[1] == gateway.admission.max_in_flight


@pytest.mark.parametrize(("interval_s", "lag_s"), [(None, 0.0), (1.0, 2.0)])
def test_a_ready_replica_takes_traffic_once_the_gateway_discovery_has_seen_it(
    interval_s: float | None, lag_s: float
) -> None:
    """Live, the gateway re-reads its backend file every `interval_s` of wall time: a
    replica listed at t is routed to from t + half that on average (x engine_speedup)."""
    from burstguard.gateway.config import GatewayConfig
    from burstguard.sim.gateway_loop import _GatewaySim

    scaling = ScalingPolicy.model_validate(
        {"kind": "predictive", "cold_start": 8.0,
         "predictive": {"rate_per_replica": 3, "min_replicas": 1, "max_replicas": 2,
                        "bin_s": 2, "trend_window_s": 60, "burst_window_s": 60}}
    )  # fmt: skip
    discovery = {} if interval_s is None else {"file": {"path": "x", "interval_s": interval_s}}
    gateway = GatewayConfig.from_dict({"engine_speedup": 4.0, "fleet": {"discovery": discovery}})
    # a burst at 1 s orders a second replica at the 2 s tick: ready at 10 s
    specs = [RequestSpec(f"b{i}", 1.0, 256, 8) for i in range(12)]
    specs += [RequestSpec(f"s{i}", t, 256, 8) for i, t in enumerate((6.0, 14.0, 20.0))]
    sim = _GatewaySim(Workload.from_specs(specs), EngineConfig(), H100, gateway, 1, None,
                      scaling)  # fmt: skip
    routable: dict[float, int] = {}
    for t in (10.0 + lag_s - 0.1, 10.0 + lag_s + 0.1):
        sim.heap.at(t, 1, lambda now: routable.__setitem__(now, len(sim.replicas.replicas)))
    sim.run()
    assert sim.scaler is not None
    ready = sim.scaler.controller.fleet.history
    assert any(h.time == 10.0 and h.ready == 2 for h in ready)
    assert list(routable.values()) == [1, 2]
