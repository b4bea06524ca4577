"""One workload through the live gateway and through the simulator, the same fault in
both: the same class per request, the same backend per affinity-routed request, the same
outcome counts.

Live: three emulators behind `burstguard gateway` (`affinity: true`, cut streams resume),
requests in five groups sharing a 256-token prefix, a fifth of them of a class the gateway
does not know (refused by name), emulator 0 SIGKILLed mid-run. Sim: `simulate_gateway` on
the same workload, config and profile, with `Fault(kill replica 0 at the same engine
time)`; its replicas carry the config's backend URLs, so the router's ring is the live one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import BURSTGUARD, start_emulator, start_fleet_gateway

from burstguard.bench.payload import PayloadBuilder
from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.sim.faults import Fault, FaultKind
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.workload.spec import RequestSpec
from burstguard.workload.traces import load_workload

SPEED = 4.0  # engine seconds per wall second, for the emulators, the gateway and the client
KILL_AT = 8.0  # engine seconds after the schedule's zero
MODEL = "llama3-8b-h100"


async def _send(
    session: aiohttp.ClientSession, base: str, payload: PayloadBuilder, spec: RequestSpec, i: int
) -> dict[str, Any]:
    path, data, headers = payload.encode(spec, i)
    async with session.post(base + path, data=data, headers=headers) as resp:
        body = await resp.read()
        broken = b'"error"' in body and resp.status == 200
        done = resp.status == 200 and b"data: [DONE]" in body and not broken
        return {"status": resp.status, "ok": done, "rid": resp.headers.get("x-request-id")}


async def _live(base: str, specs: list[RequestSpec], victim: int) -> dict[str, dict[str, Any]]:
    payload = PayloadBuilder(model=MODEL)
    loop = asyncio.get_running_loop()
    origin = loop.time() + 0.5

    async def at(t: float, spec: RequestSpec, i: int) -> dict[str, Any]:
        await asyncio.sleep(max(0.0, origin + t / SPEED - loop.time()))
        return await _send(session, base, payload, spec, i)

    async def kill() -> None:
        await asyncio.sleep(max(0.0, origin + KILL_AT / SPEED - loop.time()))
        os.killpg(victim, signal.SIGKILL)

    async with aiohttp.ClientSession() as session:
        killer = asyncio.create_task(kill())
        answers = await asyncio.gather(*(at(s.arrival_s, s, i) for i, s in enumerate(specs)))
        await killer
    return {s.id: a for s, a in zip(specs, answers, strict=True)}


def test_live_gateway_and_sim_agree_per_request(tmp_path: Path) -> None:
    workload_path = tmp_path / "wl.jsonl"
    made = subprocess.run(
        [*BURSTGUARD, "generate", "poisson", "--rate", "3", "--duration", "16", "--seed", "2",
         "--prompt-tokens", "64", "--output-tokens", "12", "--shared-prefix", "256",
         "--prefix-groups", "5", "--classes", "standard=0.8,gold=0.2", "--out",
         str(workload_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    workload = load_workload(workload_path)
    specs = list(workload.specs())
    procs = [start_emulator(tmp_path, speedup=SPEED) for _ in range(3)]
    for p in procs:
        p.start()
    try:
        urls = [p.base_url for p in procs]  # type: ignore[attr-defined]
        config: dict[str, Any] = {
            "engine_speedup": SPEED,
            "classes": [{"name": "standard", "rank": 0, "queue_deadline_s": 60.0}],
            "backends": [{"url": u, "resume": True} for u in urls],
            "fleet": {"router": {"affinity": True, "affinity_load_factor": 100.0}},
        }
        gateway = GatewayConfig.model_validate(config)
        profile = Profile.load(MODEL)
        # the victim: the replica the router gives the most requests, so the kill matters
        calm = simulate_gateway(workload, EngineConfig(), profile, gateway, replicas=3)
        assert calm.served_by is not None
        busiest = Counter(calm.served_by.values()).most_common(1)[0][0]
        names = gateway.backend_names()  # the sim names replicas as the live log does
        k = [names(u) for u in gateway.backend_urls()].index(busiest)
        gw = start_fleet_gateway(tmp_path, [], config)
        with gw:
            victim = procs[k].proc.pid  # type: ignore[union-attr]
            live = asyncio.run(_live(gw.base_url, specs, victim))  # type: ignore[attr-defined]
        log_lines = Path(str(gw.log_path)).read_text().splitlines()
    finally:
        for p in procs:
            p.stop()
    served = {}
    for line in log_lines:
        if line.startswith("{") and '"backends"' in line:
            entry = json.loads(line)
            if entry.get("backends"):
                served[entry["id"]] = entry["backends"][-1]
    sim = simulate_gateway(workload, EngineConfig(), profile, gateway, replicas=3,
                           faults=[Fault(k, KILL_AT, FaultKind.KILL)])  # fmt: skip
    records = {r.id: r for r in sim.records}
    assert sim.served_by is not None

    # the same class per request: the unknown class refused by name in both
    refused_live = {i for i, a in live.items() if a["status"] == 400}
    refused_sim = {i for i, r in records.items() if r.status == 400}
    gold = {s.id for s in specs if s.priority_class == "gold"}
    assert refused_live == refused_sim == gold and gold
    # the same outcome counts
    outcome_live = Counter("ok" if a["ok"] else str(a["status"]) for a in live.values())
    outcome_sim = Counter("ok" if r.ok else str(r.status) for r in records.values())
    assert outcome_live == outcome_sim, (outcome_live, outcome_sim)
    # the same backend per affinity-routed request (every served one has a prefix key)
    live_backend = {i: served[a["rid"]] for i, a in live.items() if a["ok"]}
    differ = {i: (b, sim.served_by.get(i)) for i, b in live_backend.items()
              if sim.served_by.get(i) != b}  # fmt: skip
    assert not differ, differ
    print(
        f"{len(specs)} requests, {len(gold)} refused by class, outcomes {dict(outcome_live)}, "
        f"per backend {Counter(live_backend.values())}, failovers (sim) {sim.failovers}"
    )
    assert sim.failovers, "the kill moved no request: the test would prove nothing"
    after = {s.id for s in specs if s.arrival_s > KILL_AT + 1.0}
    assert busiest not in {b for i, b in live_backend.items() if i in after}
    assert busiest in live_backend.values()  # it served before it died


def test_clients_that_retry_a_shed_burst_live_and_in_the_sim(tmp_path: Path) -> None:
    """A burst three times what the gateway holds (8 in flight, 8 queued): `burstguard
    bench --retry exponential` through the live gateway, and the simulator's retrying
    clients (`sim --retry`) on the same workload and config. Both shed the same share of
    the burst on its first try, send those requests again after their Retry-After, and
    end with every request served."""
    from burstguard.client.retry import RetryPolicy
    from burstguard.sim.client_retries import ClientRetry
    from burstguard.wire.records import read_records
    from burstguard.workload.spec import Workload
    from burstguard.workload.traces import write_workload

    specs = [RequestSpec(f"r{i}", 0.001 * i, 64, 48) for i in range(48)]
    workload = Workload.from_specs(specs)
    path = tmp_path / "burst.jsonl"
    write_workload(path, workload)
    config: dict[str, Any] = {
        "engine_speedup": SPEED,
        "classes": [{"name": "standard", "rank": 0}],
        "admission": {"adapt": False, "min_in_flight": 1, "max_in_flight_per_backend": 8,
                      "max_queue_requests": 8},
    }  # fmt: skip
    with start_emulator(tmp_path, speedup=SPEED) as emulator:
        config["backends"] = [{"url": emulator.base_url}]  # type: ignore[attr-defined]
        with start_fleet_gateway(tmp_path, [], config) as gw:
            res = subprocess.run(
                [*BURSTGUARD, "bench", "--quiet", "--target", gw.base_url,  # type: ignore[attr-defined]
                 "--workload", str(path), "--speedup", str(SPEED), "--retry", "exponential",
                 "--out", str(tmp_path / "live")],
                capture_output=True, text=True, timeout=120, env={**os.environ, "CI": "true"},
            )  # fmt: skip
    assert res.returncode == 0, res.stderr
    live = list(read_records(tmp_path / "live" / "records.jsonl"))
    gateway = GatewayConfig.model_validate(config)
    retry = ClientRetry(RetryPolicy("exponential"))
    sim = simulate_gateway(workload, EngineConfig(), Profile.load(MODEL), gateway, retry=retry)

    def shed_first(records: list[Any]) -> int:
        return sum(1 for r in records if r.attempts and r.attempts[0]["status"] == 429)

    counts = {name: (shed_first(rs), sum(r.retries for r in rs), sum(r.ok for r in rs))
              for name, rs in (("live", live), ("sim", sim.records))}  # fmt: skip
    print(f"(shed on the first try, retries, served) of {len(specs)}: {counts}")
    (live_shed, live_retries, live_ok), (sim_shed, sim_retries, sim_ok) = counts.values()
    assert sim_shed >= 24 and abs(live_shed - sim_shed) <= 3  # 48 - 16 held
    assert sim_retries >= sim_shed and abs(live_retries - sim_retries) <= 0.25 * sim_retries
    assert live_ok == sim_ok == len(specs)
