"""Prefix affinity, live: three emulators with prefix caching behind the gateway, requests
in groups that share a 256-token prefix (bench's own rendering of the workload's blocks).

- with `affinity: true` every request of a group lands on one backend;
- the emulators' own prefix-cache hit rate (vllm:prefix_cache_hits / _queries) is then
  clearly higher than under round robin on the same workload (fresh prefixes per run).
Requests go one at a time, so the backend a request went to is the one whose
`burstguard_backend_routed_total` moved.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from tests.conftest import start_emulator, start_fleet_gateway

from burstguard.bench.payload import PayloadBuilder
from burstguard.scrape import metric_sum, parse_metrics
from burstguard.workload.spec import RequestSpec

GROUPS, PER_GROUP, PREFIX_BLOCKS = 4, 6, 16  # 16 blocks of 16 tokens: a 256-token prefix


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        return parse_metrics(await resp.text())


async def _run(
    tmp_path: Path, urls: list[str], router: dict[str, object], salt: int
) -> tuple[dict[int, set[str]], float]:
    """Sends the grouped workload through a gateway with `router`; returns each group's
    backends and the emulators' prefix-cache hit rate over the run."""
    gw = start_fleet_gateway(tmp_path, urls, {"fleet": {"router": router}})
    payload = PayloadBuilder(model="llama3-8b-h100", stream=False)
    placed: dict[int, set[str]] = {g: set() for g in range(GROUPS)}
    with gw:
        base = gw.base_url  # type: ignore[attr-defined]
        async with aiohttp.ClientSession() as session:
            before = [await _metrics(session, u) for u in urls]
            for k in range(GROUPS * PER_GROUP):
                group = k % GROUPS
                prefix = tuple(salt * 10_000 + group * 100 + b for b in range(PREFIX_BLOCKS))
                spec = RequestSpec(f"s{salt}-{k}", 0.0, 380, 4, prefix_hashes=prefix)
                routed = parse_metrics(await (await session.get(base + "/metrics")).text())
                async with session.post(
                    base + "/v1/chat/completions", json=payload.body(spec, k)
                ) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                after = parse_metrics(await (await session.get(base + "/metrics")).text())
                moved = [  # backend-<i>: the i-th --backend (labels are names, not URLs)
                    u for i, u in enumerate(urls)
                    if after.get(f'burstguard_backend_routed_total{{backend="backend-{i}"}}', 0.0)
                    > routed.get(f'burstguard_backend_routed_total{{backend="backend-{i}"}}', 0.0)
                ]  # fmt: skip
                assert len(moved) == 1, moved
                placed[group].add(moved[0])
            end = [await _metrics(session, u) for u in urls]

    def delta(name: str) -> float:
        return sum(
            (metric_sum(e, name) or 0.0) - (metric_sum(b, name) or 0.0)
            for b, e in zip(before, end, strict=True)
        )

    queries = delta("vllm:prefix_cache_queries_total")
    assert queries > 0
    return placed, delta("vllm:prefix_cache_hits_total") / queries


async def test_affinity_keeps_a_prefix_on_one_backend_and_raises_the_hit_rate(
    tmp_path: Path,
) -> None:
    procs = [start_emulator(tmp_path, "--enable-prefix-caching") for _ in range(3)]
    for p in procs:
        p.start()
    try:
        urls = [p.base_url for p in procs]  # type: ignore[attr-defined]
        placed, affine = await _run(
            tmp_path, urls, {"policy": "round_robin", "affinity": True}, salt=1
        )
        assert all(len(backends) == 1 for backends in placed.values()), placed
        spread, rr = await _run(tmp_path, urls, {"policy": "round_robin"}, salt=2)
        assert any(len(backends) > 1 for backends in spread.values()), spread
        print(f"prefix-cache hit rate: affinity {affine:.1%}, round robin {rr:.1%}")
        assert affine > rr + 0.1, (affine, rr)
    finally:
        for p in procs:
            p.stop()
