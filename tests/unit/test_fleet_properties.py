"""Invariants of the fleet under random event sequences (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from burstguard.core.fleet.config import FleetConfig, RouterConfig
from burstguard.core.fleet.fleet import FAILURE_REASONS, Fleet
from burstguard.core.fleet.membership import Membership
from burstguard.core.fleet.router import BackendView, Router, RouteRequest

URLS = [f"http://b{i}:8000" for i in range(5)]

events = st.lists(
    st.one_of(
        st.tuples(st.just("route"), st.integers(0, 30), st.integers(1, 500)),
        st.tuples(st.just("fail"), st.integers(0, 30), st.sampled_from(FAILURE_REASONS)),
        st.tuples(st.just("done"), st.integers(0, 30), st.none()),
        st.tuples(st.just("members"), st.sets(st.sampled_from(URLS)), st.none()),
        st.tuples(st.just("probe"), st.sampled_from(URLS), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(events, st.sampled_from(["score", "round_robin", "least_request"]), st.booleans())
def test_fleet_bookkeeping_stays_consistent(
    script: list[tuple[str, object, object]], policy: str, affinity: bool
) -> None:
    cfg = FleetConfig(router=RouterConfig(policy=policy, affinity=affinity))  # type: ignore[arg-type]
    fleet = Fleet(cfg, URLS[:3])
    live: dict[str, int] = {}  # request -> tokens, as the core would track it
    now = 0.0
    for kind, a, b in script:
        now += 0.1
        if kind == "route" and f"r{a}" not in live:
            url = fleet.route(f"r{a}", RouteRequest(int(b)), now)  # type: ignore[call-overload]
            if url is not None:
                assert url in fleet.backends
                live[f"r{a}"] = int(b)  # type: ignore[call-overload]
        elif kind == "fail" and f"r{a}" in live:
            answer = fleet.on_failure(f"r{a}", str(b), now)
            if answer.backend is None:
                del live[f"r{a}"]
            else:
                assert answer.backend not in answer.tried[:-1]
        elif kind == "done" and f"r{a}" in live:
            fleet.on_done(f"r{a}", now)
            del live[f"r{a}"]
        elif kind == "members":
            fleet.set_backends(sorted(a), now)  # type: ignore[arg-type]
        elif kind == "probe" and a in fleet.backends:
            fleet.on_probe(str(a), bool(b), now)
        stats = fleet.stats(now)
        assert sum(s.in_flight for s in stats) == len(live)
        assert sum(s.in_flight_tokens for s in stats) == sum(live.values())
        # a draining backend is kept exactly while it has requests in flight
        assert all(s.active or s.in_flight > 0 for s in stats)


@given(st.lists(st.sets(st.sampled_from(URLS)), max_size=20))
def test_membership_tracks_the_last_list(updates: list[set[str]]) -> None:
    m = Membership()
    for urls in updates:
        before = set(m.active) | set(m.draining)
        change = m.update(sorted(urls))
        assert set(m.active) == urls
        assert not set(m.active) & set(m.draining)
        assert set(change.added) == urls - before
        assert set(m.draining) >= set(change.draining)


@given(
    st.lists(st.integers(0, 20), min_size=1, max_size=8),
    st.integers(0, 2**63),
    st.floats(1.0, 3.0),
)
def test_affinity_never_exceeds_the_load_bound(loads: list[int], key: int, factor: float) -> None:
    router = Router(RouterConfig(affinity=True, affinity_load_factor=factor))
    views = [BackendView(f"http://b{i}", n) for i, n in enumerate(loads)]
    url = router.pick(RouteRequest(10, (key,)), views)
    assert url is not None
    chosen = next(v for v in views if v.url == url)
    # the least loaded backend is always within the bound: affinity always places it
    assert router.affinity_hits == 1
    assert chosen.in_flight + 1 <= math.ceil(factor * (sum(loads) + 1) / len(loads))
