"""Router policies: proportions over unequal replicas, saturation, bounded-load affinity."""

from __future__ import annotations

import math
from collections import Counter

from burstguard.gateway.fleet.affinity import HashRing, affinity_key, bounded_capacity
from burstguard.gateway.fleet.config import RouterConfig
from burstguard.gateway.fleet.router import BackendView, Router, RouteRequest
from burstguard.wire.prefix import block_hashes as prompt_block_hashes


def _serve(
    policy: str, speeds: dict[str, float], n: int = 20000, rate: float = 0.8
) -> tuple[Counter[str], dict[str, int]]:
    """A tiny deterministic fleet: each backend finishes `speed` tokens per tick shared
    over its requests (processor sharing); `rate` x total capacity arrives per tick in
    requests of 1000 tokens (the gateway's in-flight tokens are their costs, fixed until
    they finish, as in the live gateway). Returns requests routed and the peak in flight
    per backend (each capped at 64)."""
    router = Router(RouterConfig(policy=policy))  # type: ignore[arg-type]
    left: dict[str, list[float]] = {u: [] for u in speeds}
    routed: Counter[str] = Counter()
    peak = dict.fromkeys(speeds, 0)
    per_tick = rate * sum(speeds.values()) / 1000
    owed = 0.0
    for _ in range(n):
        owed += per_tick
        while owed >= 1:
            owed -= 1
            views = [BackendView(u, len(r), 1000 * len(r), cap=64) for u, r in left.items()]
            url = router.pick(RouteRequest(1000), views)
            assert url is not None
            left[url].append(1000.0)
            routed[url] += 1
            peak[url] = max(peak[url], len(left[url]))
        for url, reqs in left.items():
            if reqs:
                share = speeds[url] / len(reqs)
                left[url] = [t - share for t in reqs if t - share > 0]
    return routed, peak


def test_score_routes_in_proportion_to_speed_round_robin_does_not() -> None:
    speeds = {"http://fast": 200.0, "http://slow": 100.0}
    scored, scored_peak = _serve("score", speeds)
    _, rr_peak = _serve("round_robin", speeds)
    share = scored["http://fast"] / scored.total()
    assert 0.6 <= share <= 0.72, scored  # ~2/3: the fast one holds fewer tokens
    assert max(scored_peak.values()) < 32
    # round robin gives the slow one half, more than it can serve: it fills to its cap
    assert rr_peak["http://slow"] == 64 and scored_peak["http://slow"] < 32


def test_least_request_prefers_fewest_in_flight_and_rotates_ties() -> None:
    router = Router(RouterConfig(policy="least_request"))
    views = [BackendView("a", 3), BackendView("b", 1), BackendView("c", 1)]
    picks = Counter(router.pick(RouteRequest(10), views) for _ in range(10))
    assert set(picks) == {"b", "c"} and picks["b"] == picks["c"] == 5


def test_score_counts_own_tokens_not_requests() -> None:
    """One long request outweighs two short ones; least-request sees it the other way."""
    long_one = BackendView("long", 1, 10_000)
    two_short = BackendView("short", 2, 200)
    assert Router(RouterConfig()).pick(RouteRequest(100), [long_one, two_short]) == "short"
    least = Router(RouterConfig(policy="least_request"))
    assert least.pick(RouteRequest(100), [long_one, two_short]) == "long"


def test_full_backends_are_skipped_and_none_when_all_full() -> None:
    router = Router(RouterConfig())
    views = [BackendView("a", 2, 10, cap=2), BackendView("b", 5, 999, cap=8)]
    assert router.pick(RouteRequest(10), views) == "b"
    assert router.pick(RouteRequest(10), [BackendView("a", 2, cap=2)]) is None


def test_stale_metrics_count_as_saturated_not_idle() -> None:
    router = Router(RouterConfig())
    idle_but_stale = BackendView("stale", 0, 0, waiting=0, kv_usage=0.0, stale=True)
    busy = BackendView("busy", 4, 4000, waiting=0, kv_usage=0.5)
    assert all(router.pick(RouteRequest(100), [idle_but_stale, busy]) == "busy" for _ in range(5))
    # all saturated: fail open, pick by score
    also_stale = BackendView("busy", 4, 4000, stale=True)
    assert router.pick(RouteRequest(100), [idle_but_stale, also_stale]) == "stale"


def test_score_weighs_waiting_and_kv() -> None:
    router = Router(RouterConfig(saturated_waiting=100, saturated_kv=1.0))
    # same own load: the engine queue of other traffic decides
    a = BackendView("a", 1, 100, waiting=3, kv_usage=0.1)
    b = BackendView("b", 1, 100, waiting=0, kv_usage=0.1)
    assert router.pick(RouteRequest(100), [a, b]) == "b"
    # same queue: the fuller KV cache loses
    c = BackendView("c", 1, 100, waiting=0, kv_usage=0.9)
    assert router.pick(RouteRequest(100), [c, b]) == "b"


def test_prompt_block_hashes_are_chained_and_stable() -> None:
    text = "x" * 64 * 3 + "tail"
    h = prompt_block_hashes(text, 16)
    assert len(h) == 3  # the partial block is not hashed
    other = prompt_block_hashes("y" * 64 + "x" * 128, 16)
    assert h[1] != other[1] and h[2] != other[2]  # a block's hash covers what precedes it
    assert prompt_block_hashes(text, 16, max_blocks=2) == h[:2]
    assert affinity_key(h, 4) == affinity_key((*h, 5), 3)  # only the first blocks count
    assert affinity_key((), 4) is None


def test_affinity_keeps_a_prefix_on_one_replica() -> None:
    router = Router(RouterConfig(affinity=True))
    views = [BackendView(f"http://b{i}", 1) for i in range(4)]
    for p in range(20):
        hashes = prompt_block_hashes(f"system prompt {p} " * 20)
        picks = {router.pick(RouteRequest(100, hashes), views) for _ in range(5)}
        assert len(picks) == 1
    # different prefixes spread over the replicas
    spread = Counter(
        router.pick(RouteRequest(100, prompt_block_hashes(f"p{p} " * 40)), views)
        for p in range(200)
    )
    assert len(spread) == 4 and min(spread.values()) > 20


def test_affinity_load_is_bounded_for_a_hot_prefix() -> None:
    cfg = RouterConfig(affinity=True, affinity_load_factor=1.25)
    router = Router(cfg)
    hot = prompt_block_hashes("the same system prompt " * 30)
    load = {f"http://b{i}": 0 for i in range(4)}
    for _ in range(100):  # nothing finishes: the hot prefix alone fills the fleet
        views = [BackendView(u, n) for u, n in load.items()]
        url = router.pick(RouteRequest(100, hot), views)
        assert url is not None
        load[url] += 1
        total = sum(load.values())
        assert max(load.values()) <= bounded_capacity(total - 1, 4, 1.25)
    assert max(load.values()) <= math.ceil(1.25 * 100 / 4)
    assert router.affinity_spills > 0


def test_ring_moves_only_the_removed_backends_keys() -> None:
    ring = HashRing(64)
    members = [f"http://b{i}" for i in range(5)]
    keys = [affinity_key((k,), 1) for k in range(500)]
    before = {k: ring.walk(k, members)[0] for k in keys if k is not None}
    after = {k: ring.walk(k, members[:-1])[0] for k in before}
    moved = [k for k in before if before[k] != after[k]]
    assert moved and all(before[k] == "http://b4" for k in moved)
