"""Limits shared by gateway replicas through a real redis-server (started on a free port):
the lease bound across 3 gateways, TTL expiry, degraded mode and rejoin, aggregates."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from burstguard.errors import BurstguardError
from burstguard.gateway.backend_metrics import backend_state
from burstguard.gateway.fleet.config import FleetConfig, RedisConfig
from burstguard.gateway.fleet.shared_state import SharedState, local_cap
from burstguard.procs import free_port
from burstguard.redis_server import RedisServer

BACKEND = "http://10.0.0.1:8000"


def _lease_count(server: RedisServer, backend: str) -> int:
    return int(server.client().zcard(f"burstguard:leases:{backend}"))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (make system-deps)")
        pytest.skip("redis-server is not installed: run `make system-deps` as root")
    with RedisServer(tmp_path) as server:
        yield server


def _gateways(url: str, n: int = 3, **kw: object) -> list[SharedState]:
    cfg = RedisConfig(url=url, replicas=n, **kw)  # type: ignore[arg-type]
    return [SharedState(cfg, f"gw{i}") for i in range(n)]


async def _close(states: list[SharedState]) -> None:
    for s in states:
        await s.close()


async def test_three_gateways_never_hold_more_than_the_cap(redis_server: RedisServer) -> None:
    gws = _gateways(redis_server.url)
    held = peak = 0
    refused = 0
    rng = random.Random(7)

    async def one(gw: SharedState, rid: str) -> None:
        nonlocal held, peak, refused
        deadline = time.monotonic() + 20
        while not await gw.acquire(BACKEND, rid, 8):
            refused += 1
            assert time.monotonic() < deadline
            await asyncio.sleep(0.002)
        held += 1
        peak = max(peak, held)
        await asyncio.sleep(rng.uniform(0.005, 0.02))
        held -= 1
        await gw.release(BACKEND, rid)

    try:
        await asyncio.gather(*(one(gw, f"r{i}") for gw in gws for i in range(40)))
    finally:
        await _close(gws)
    assert peak == 8  # the cap was reached, never passed
    assert refused > 0
    assert _lease_count(redis_server, BACKEND) == 0  # every lease was released


async def test_a_dead_gateways_leases_expire_a_live_ones_are_renewed(
    redis_server: RedisServer,
) -> None:
    dead, live, other = _gateways(redis_server.url, lease_ttl_s=0.5, sync_interval_s=0.1)
    try:
        for i in range(4):
            assert await dead.acquire(BACKEND, f"d{i}", 8)
            assert await live.acquire(BACKEND, f"l{i}", 8)
        assert not await other.acquire(BACKEND, "o0", 8)
        await dead.close()  # dies: no release, no renewal
        start = time.monotonic()
        while time.monotonic() - start < 1.0:  # past two TTLs, `live` keeps renewing
            result = await live.sync(queue_depth=0, arrival_rate=0.0, backends=(BACKEND,))
            await asyncio.sleep(0.1)
        assert result.leases[BACKEND] == 4  # only the live gateway's leases are left
        assert [await other.acquire(BACKEND, f"o{i}", 8) for i in range(5)] == [True] * 4 + [False]
    finally:
        await _close([live, other])


async def test_redis_killed_serves_degraded_then_rejoins(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    gw1, gw2, _ = gws = _gateways(redis_server.url, rejoin_interval_s=0.2)
    try:
        assert await gw1.acquire(BACKEND, "a", 8)
        redis_server.kill()
        # degraded: a local cap of 8 // 3 = 2 per gateway, leases held before still count
        assert [await gw2.acquire(BACKEND, f"b{i}", 8) for i in range(3)] == [True, True, False]
        assert gw2.degraded and gw2.errors >= 1
        assert "serving on local caps" in caplog.text
        assert await gw1.acquire(BACKEND, "a2", 8) and not await gw1.acquire(BACKEND, "a3", 8)
        await gw1.release(BACKEND, "a")  # while degraded: remembered, dropped on rejoin
        assert (await gw1.sync(0, 0.0, (BACKEND,))).degraded
        redis_server.start()  # empty: no persistence
        await asyncio.sleep(0.25)
        r1 = await gw1.sync(1, 2.0, (BACKEND,))
        r2 = await gw2.sync(3, 4.0, (BACKEND,))
        assert not r1.degraded and not r2.degraded and gw2.rejoins == 1
        assert _lease_count(redis_server, BACKEND) == 3  # a2, b0, b1 re-registered
        assert r2.aggregate is not None
        assert (r2.aggregate.gateways, r2.aggregate.queue_depth) == (2, 4)
        assert r2.aggregate.arrival_rate == pytest.approx(6.0)
        # shared again: 5 more fit under the cap of 8, not more
        assert [await gws[2].acquire(BACKEND, f"c{i}", 8) for i in range(6)] == [True] * 5 + [False]
    finally:
        await _close(gws)


def _usage(server: RedisServer, cls: str, tenant: str) -> float:
    """A tenant's usage summed over the live window hashes of its class."""
    client = server.client()
    return sum(
        float(client.hget(key, tenant) or 0)
        for key in client.scan_iter(f"burstguard:tenant_usage:{cls}:*")
    )


async def test_replicas_learn_what_the_others_served_their_tenants(
    redis_server: RedisServer,
) -> None:
    """Each sync flushes a replica's own usage and returns what the *others* served the
    tenants it asks about since its last read (a first read is only a baseline)."""
    gw1, gw2 = gws = _gateways(redis_server.url, n=2)
    mine = {"standard": ["acme", "zeta"]}
    try:
        gw2.charge_tenant("standard", "acme", 50)
        gw2.charge_tenant("standard", "zeta", 7)
        assert (await gw2.sync(0, 0.0, tenants=mine)).fleet_service == {}  # baseline
        gw1.charge_tenant("standard", "acme", 100)
        gw1.charge_tenant("batch", "acme", 1000)  # another class: another counter
        assert (await gw1.sync(0, 0.0, tenants={"standard": ["acme"]})).fleet_service == {}
        gw2.charge_tenant("standard", "acme", 30)
        assert (await gw2.sync(0, 0.0, tenants=mine)).fleet_service == {
            "standard": {"acme": 100.0}  # gw1's, not its own 30; zeta: nobody else
        }
        again = await gw1.sync(0, 0.0, tenants={"standard": ["acme"], "batch": ["acme"]})
        assert again.fleet_service == {"standard": {"acme": 30.0}}  # batch: a baseline
        assert _usage(redis_server, "standard", "acme") == 180.0
        assert _usage(redis_server, "batch", "acme") == 1000.0
    finally:
        await _close(gws)


async def test_fleet_service_is_exact_across_window_boundaries(redis_server: RedisServer) -> None:
    """Windows of 0.2 s, a sync every 30 ms for 1 s: gw2 learns every token gw1 served
    after its first read, none twice, though the hashes roll over five times."""
    gw1, gw2 = gws = _gateways(redis_server.url, n=2, tenant_window_s=0.2)
    learned = 0.0
    try:
        start, n = time.monotonic(), 0
        while time.monotonic() - start < 1.0:
            gw1.charge_tenant("standard", "acme", 10)
            await gw1.sync(0, 0.0)
            served = (await gw2.sync(0, 0.0, tenants={"standard": ["acme"]})).fleet_service
            learned += served.get("standard", {}).get("acme", 0.0)
            n += 1
            await asyncio.sleep(0.03)
        assert n >= 10
        assert learned == pytest.approx(10 * (n - 1))  # all but the baseline's
        client = redis_server.client()
        keys = list(client.scan_iter("burstguard:tenant_usage:standard:*"))
        assert 1 <= len(keys) <= 3  # old windows expired
        assert all(0 < client.pttl(k) <= 400 for k in keys)  # two windows
    finally:
        await _close(gws)


async def test_tenant_usage_in_redis_is_bounded(redis_server: RedisServer) -> None:
    """A window's hash holds at most `max_tenants` tenants per class (+ ~overflow), both
    in one replica's buffer and over replicas (the script folds the rest)."""
    gw1, gw2 = gws = _gateways(redis_server.url, n=2, max_tenants=50)
    try:
        for i in range(500):  # one replica: its buffer folds past 50
            gw1.charge_tenant("standard", f"a{i}", 1)
        await gw1.sync(0, 0.0)
        for i in range(40):  # two replicas, 80 tenants in all: the script folds past 50
            gw1.charge_tenant("batch", f"b{i}", 1)
            gw2.charge_tenant("batch", f"c{i}", 1)
        await gw1.sync(0, 0.0)
        await gw2.sync(0, 0.0)
        client = redis_server.client()
        for cls, total in (("standard", 500), ("batch", 80)):
            (key,) = client.scan_iter(f"burstguard:tenant_usage:{cls}:*")
            assert client.hlen(key) <= 50 + 1
            assert sum(float(v) for v in client.hvals(key)) == total  # no usage lost
            assert float(client.hget(key, "~overflow") or 0) > 0
    finally:
        await _close(gws)


async def test_unreachable_redis_at_start_degrades_or_names_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    state = SharedState(RedisConfig(url=url, replicas=4), "gw")
    try:
        assert not await state.connect()
        assert state.degraded and "Redis unreachable" in caplog.text
        assert [await state.acquire(BACKEND, f"r{i}", 8) for i in range(3)] == [True, True, False]
    finally:
        await state.close()
    strict = SharedState(RedisConfig(url=url, required=True), "gw")
    try:
        with pytest.raises(BurstguardError, match=r"fleet\.redis\.url: cannot reach Redis"):
            await strict.connect()
    finally:
        await strict.close()
    with pytest.raises(ValueError, match=r"redis\.url[\s\S]*expected redis://"):
        FleetConfig.model_validate({"redis": {"url": "http://localhost:6379"}})
    assert local_cap(8, 3) == 2 and local_cap(2, 3) == 1


async def _peak_gauges(urls: list[str], peaks: dict[str, list[float]], stop: asyncio.Event) -> None:
    """Scrapes each engine's running and waiting gauges every 20 ms, keeping the peaks."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            for url in urls:
                async with session.get(url + "/metrics") as resp:
                    state = backend_state(await resp.text())
                peaks[url][0] = max(peaks[url][0], state.running or 0)
                peaks[url][1] = max(peaks[url][1], state.waiting or 0)
            await asyncio.sleep(0.02)
