"""`burstguard sim --faults`: replicas killed or stalled on a schedule, and the gateway
core's failure rules deciding what follows, fed the events the live relay feeds them.

The small cases are built so that the core's rules (docs/gateway.md, "Failover") predict
each outcome: requests with no token yet fail over while the retry budget allows and are
abandoned with the failure's status once it is spent; a request whose client holds tokens
goes on elsewhere only when its backend can resume it, else its stream breaks."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import BURSTGUARD

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.fleet.fleet import FAILURE_REASONS
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.events import Release
from burstguard.core.gateway.failure import Failure
from burstguard.http.client import Broken, Unreachable, UpstreamTimeout
from burstguard.live.gateway.errors import failure_of
from burstguard.sim.defaults import fleet_gateway
from burstguard.sim.faults import Fault, FaultFileError, FaultKind, parse_faults
from burstguard.sim.gateway_loop import _GatewaySim, simulate_gateway
from burstguard.sim.replicas import replica_id
from burstguard.wire.records import RequestRecord
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.synth import PatternSpec, synthesize

H100 = Profile.load("llama3-8b-h100")
ENGINE = EngineConfig(max_num_seqs=16)
ONE = replica_id(1)


def six(prompt: int = 4000, output: int = 500) -> Workload:
    """Six requests at once: round robin puts 0, 2, 4 on replica 0 and 1, 3, 5 on 1."""
    return Workload.from_specs([RequestSpec(f"r{i}", 0.0, prompt, output) for i in range(6)])


def config(resume: bool = False, **budget: Any) -> GatewayConfig:
    doc: dict[str, Any] = {"fleet": {"router": {"policy": "round_robin"}}}
    if budget:
        doc["fleet"]["retry_budget"] = budget
    if resume:
        doc["backends"] = [{"url": "http://replica-0", "resume": True}]
    return GatewayConfig.from_dict(doc)


def kill(at: float, after: float | None = None) -> tuple[Fault, ...]:
    return (Fault(1, at, FaultKind.KILL, after),)


def outcomes(res: Any) -> Counter[tuple[int | None, str | None]]:
    return Counter((r.status, r.error) for r in res.records)


def test_a_killed_replicas_requests_fail_over_to_the_other() -> None:
    """Killed before any first token: its 3 requests are retryable and the budget's 3
    retries in flight allow them all, so all 6 complete, 3 of them on replica 0."""
    res = simulate_gateway(six(), ENGINE, H100, config(), 2, faults=kill(0.01))
    assert all(r.ttft_s is not None and r.ttft_s > 0.01 for r in res.records)
    assert res.failovers == {"failover": 3}
    assert res.routed == {"backend-0": 6, "backend-1": 3}  # as the live gateway names them
    assert outcomes(res) == {(200, None): 6}
    assert all(r.completion_tokens == 500 for r in res.records)


def test_a_spent_retry_budget_abandons_with_the_failures_status() -> None:
    """No budget beyond one retry in flight: one fails over, two are abandoned; the
    client gets what live sends for a reset connection (502)."""
    cfg = config(ratio=0.0, min_concurrency=1)
    res = simulate_gateway(six(), ENGINE, H100, cfg, 2, faults=kill(0.01))
    assert res.failovers == {"failover": 1, "budget": 2}
    assert outcomes(res) == {(200, None): 4, (Failure.RESET.status, "http_502"): 2}
    assert res.gateway is not None
    assert res.gateway.outcomes["standard"]["failed"] == 2
    assert res.gateway.outcomes["standard"]["completed"] == 4


def test_a_started_stream_breaks_unless_its_backend_resumes() -> None:
    """Killed mid-answer: a client holding tokens can go on elsewhere only when the
    backend continues a given text (`resume`); then nothing is lost but time."""
    plain = simulate_gateway(six(), ENGINE, H100, config(), 2, faults=kill(2.0))
    assert plain.failovers == {"not_retryable": 3}
    broken = [r for r in plain.records if r.error == "stream_broken"]
    assert len(broken) == 3 and all(r.status == 200 for r in broken)
    assert all(0 < (r.completion_tokens or 0) < 500 for r in broken)
    resumed = simulate_gateway(six(), ENGINE, H100, config(resume=True), 2, faults=kill(2.0))
    assert resumed.failovers == {"failover": 3}
    assert outcomes(resumed) == {(200, None): 6}
    assert all(r.completion_tokens == 500 for r in resumed.records)
    assert resumed.reprefill_tokens > 3 * 4000  # prompt plus the tokens so far, again


def fleet_load() -> Workload:
    spec = PatternSpec(pattern="poisson", rate=15.0, duration_s=60, seed=4,
                       prompt_tokens="lognormal:mean=600,sigma=0.6",
                       output_tokens="lognormal:mean=150,sigma=0.6")  # fmt: skip
    return synthesize(spec)


def test_a_replica_killed_mid_run_in_a_fleet_run() -> None:
    """Three replicas under load, one killed at 20 s and back at 35 s. The gateway keeps
    the queue, so what the replica holds has started: without `resume` those streams
    break; with it they go on elsewhere. Either way the breaker keeps new requests off it
    while it is down (none is even refused), it serves again after its restart, and every
    request ends exactly once."""
    wl = fleet_load()
    broken = simulate_gateway(wl, ENGINE, H100, fleet_gateway(3), 3, faults=kill(20.0, 15.0))
    assert broken.failovers is not None and set(broken.failovers) == {"not_retryable"}
    assert sum(r.error == "stream_broken" for r in broken.records) == broken.failovers[
        "not_retryable"] >= 3  # fmt: skip
    sent: list[tuple[float, str]] = []

    class Spy(_GatewaySim):  # (compiled by mypyc, it can be subclassed, not patched)
        def release(self, effect: Release, rec: RequestRecord, now: float) -> None:
            sent.append((now, effect.backend or ""))
            super().release(effect, rec, now)

    sim = Spy(wl, ENGINE, H100, config(resume=True), 3, faults=kill(20.0, 15.0))
    res = sim.run()
    assert res.gateway is not None
    assert sum(sum(o.values()) for o in res.gateway.outcomes.values()) == len(wl)
    assert res.failovers is not None and res.failovers["failover"] >= 3
    assert sum(res.failovers.values()) == res.failovers["failover"]
    assert all(r.ok and r.completion_tokens for r in res.records)
    to_one = [t for t, url in sent if url == ONE]
    assert not [t for t in to_one if 20.0 < t < 35.0]
    assert [t for t in to_one if t > 35.0]  # back in the rotation after its restart
    assert set(sim.failures.values()) == {Failure.RESET}
    plain = simulate_gateway(wl, ENGINE, H100, config(resume=True), 3)
    assert plain.failovers == {} and all(r.ok for r in plain.records)


def test_without_deadlines_a_stalled_replica_holds_its_requests_until_the_read_timeout() -> None:
    """Stalled: no step, no token, connections open. With `backend_deadlines` off (the
    EPP's case) the probes open the breaker but what it holds waits for the backend's read
    timeout (`timeout`), then fails over; a restart before the timeout cuts it (`reset`)."""
    doc = {"backends": [{"url": "http://replica-0", "read_timeout_s": 3.0}],
           "fleet": {"router": {"policy": "round_robin"}},
           "backend_deadlines": {"enabled": False}}  # fmt: skip
    cfg = GatewayConfig.from_dict(doc)
    stall = (Fault(1, 0.01, FaultKind.STALL, 30.0),)
    sim = _GatewaySim(six(), ENGINE, H100, cfg, 2, faults=stall)
    res = sim.run()
    assert set(sim.failures.values()) == {Failure.TIMEOUT}
    assert res.failovers == {"failover": 3}
    moved = [r for r in res.records if r.ttft_s is not None and r.ttft_s > 3.0]
    assert len(moved) == 3 and all(r.ok for r in res.records)
    early = (Fault(1, 0.01, FaultKind.STALL, 1.0),)
    sim = _GatewaySim(six(), ENGINE, H100, cfg, 2, faults=early)
    res = sim.run()
    assert set(sim.failures.values()) == {Failure.RESET}
    assert res.failovers == {"failover": 3} and res.end_s < 30


def test_a_stalled_replica_loses_what_it_holds_when_its_circuit_opens() -> None:
    """The probes of a stalled replica time out; when its circuit opens (3 failed probes,
    ~1.5 s) the requests it holds move to the other replica at once (`circuit_open`),
    not after its 600 s read timeout."""
    sim = _GatewaySim(six(), ENGINE, H100, config(), 2, faults=(Fault(1, 0.01, FaultKind.STALL),))
    res = sim.run()
    assert set(sim.failures.values()) == {Failure.CIRCUIT_OPEN}
    assert res.failovers == {"failover": 3} and all(r.ok for r in res.records)
    moved = [r.ttft_s for r in res.records if r.ttft_s is not None and r.ttft_s > 1.0]
    assert len(moved) == 3 and max(moved) < 3.0
    assert [s for _, url, s in sim.circuits if url == ONE][:1] == ["open"]


def deadlines(resume: bool = False, **dl: Any) -> GatewayConfig:
    doc = config(resume).model_dump()
    doc["backend_deadlines"] = {**doc["backend_deadlines"], **dl}
    return GatewayConfig.from_dict(doc)


def test_a_wedged_replica_is_left_at_the_first_token_deadline() -> None:
    """Wedged: it steps no more but its /health answers, so its circuit stays closed: the
    first-token deadline (max(floor, 4 x predicted TTFT)) moves each request it holds; the
    third timeout opens its circuit. Without the deadline they waited for the restart."""
    wedge = (Fault(1, 0.01, FaultKind.WEDGE, 60.0),)
    cfg = deadlines(first_token_floor_s=1.0, prefill_tokens_per_s=20_000)
    sim = _GatewaySim(six(), ENGINE, H100, cfg, 2, faults=wedge)
    res = sim.run()
    assert set(sim.failures.values()) == {Failure.NO_FIRST_TOKEN}
    assert res.failovers == {"failover": 3} and all(r.ok for r in res.records)
    # predicted TTFT 0.2 s per 4,000-token prompt ahead: cut at 1 s, 1.6 s and 2.4 s
    moved = sorted(r.ttft_s for r in res.records if r.ttft_s is not None and r.ttft_s > 0.9)
    assert len(moved) == 3 and moved[-1] < 2.4 + 1.0
    off = _GatewaySim(six(), ENGINE, H100, deadlines(enabled=False), 2, faults=wedge).run()
    assert max(r.ttft_s or 0 for r in off.records) > 60.0


@pytest.mark.parametrize("resume", [True, False])
def test_a_stream_stalled_mid_answer_resumes_elsewhere_or_ends_in_band(resume: bool) -> None:
    """Wedged at 3 s, mid-stream: after `stall_s` (2 s) of silence each stream it holds
    resumes on the other replica with what its client has (every token arrives once), or,
    where the backend cannot resume, ends with one in-band error."""
    wedge = (Fault(1, 3.0, FaultKind.WEDGE, 60.0),)
    sim = _GatewaySim(six(), ENGINE, H100, deadlines(resume, stall_s=2.0), 2, faults=wedge)
    res = sim.run()
    assert set(sim.failures.values()) == {Failure.STALLED}
    cut = [r for r in res.records if r.error is not None]
    if resume:
        assert res.failovers == {"failover": 3} and not cut
        assert all(r.completion_tokens == 500 for r in res.records)
        assert max(r.e2e_s or 0 for r in res.records) < 3.0 + 2.0 + 0.6 + 10.0
    else:
        assert res.failovers == {"not_retryable": 3} and len(cut) == 3
        assert all(r.error == "stream_broken" and 0 < (r.completion_tokens or 0) < 500
                   for r in cut)  # fmt: skip
        assert all(3.0 + 2.0 - 0.26 <= (r.e2e_s or 0) <= 3.0 + 2.0 + 0.6 for r in cut)


def test_the_live_relay_and_the_sim_share_the_failure_kinds() -> None:
    assert {f.reason for f in Failure} == set(FAILURE_REASONS)
    assert failure_of(Unreachable("refused")) is Failure.REFUSED
    assert failure_of(UpstreamTimeout("silent")) is Failure.TIMEOUT
    assert failure_of(Broken("reset")) is Failure.RESET
    assert Failure.REFUSED.error()["error"]["code"] == "backend_unreachable"
    assert (Failure.TIMEOUT.status, Failure.REFUSED.status, Failure.RESET.status) == (504, 503, 502)


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"replica": 0}, "expected a list"),
        ([], "expected a list"),
        (["kill"], "fault 1: expected a mapping"),
        ([{"replica": 0, "at": 1}], "fault 1: kind is missing"),
        ([{"replica": 0, "at": 1, "kind": "explode"}], "kind must be one of kill, stall"),
        ([{"replica": -1, "at": 1, "kind": "kill"}], "replica must be a replica index"),
        ([{"replica": 0, "at": "soon", "kind": "kill"}], "at must be a number of seconds"),
        ([{"replica": 0, "at": 1, "kind": "kill", "restart_after": 0}], "restart_after must"),
        ([{"replica": 0, "at": 1, "kind": "kill", "when": 3}], "unknown key 'when'"),
        ([{"replica": 0, "at": 1, "kind": "kill", "restart_after": 10},
          {"replica": 0, "at": 5, "kind": "stall"}], "replica 0 is still down"),
    ],
)  # fmt: skip
def test_bad_schedules_are_refused_with_what_is_wrong(doc: object, words: str) -> None:
    with pytest.raises(FaultFileError, match=words):
        parse_faults(doc, "f.yaml")


def test_bad_faults_files_exit_2_with_a_clear_message(tmp_path: Path) -> None:
    good = [{"replica": 1, "at": 5, "kind": "kill", "restart_after": 5}]
    cases = {
        "missing.yaml": (None, "cannot read it"),
        "broken.yaml": ("- {replica: 0, at: [", "neither YAML nor JSON"),
        "absent.json": (json.dumps([{**good[0], "replica": 3}]), "replica 3 does not exist"),
        "good.json": (json.dumps(good), ""),
    }
    base = ["sim", "--pattern", "poisson", "--rate", "5", "--duration", "20",
            "--gateway", "examples/gateway.yaml", "--replicas", "2"]  # fmt: skip
    for name, (text, words) in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        proc = subprocess.run([*BURSTGUARD, *base, "--faults", str(path)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        if not words:
            assert proc.returncode == 0, proc.stderr
            assert "faults: 1" in proc.stdout
            continue
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert words in proc.stderr and "--faults" in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = subprocess.run([*BURSTGUARD, "sim", "--pattern", "poisson", "--rate", "5",
                           "--faults", str(tmp_path / "good.json")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "--faults needs a fleet" in proc.stderr
