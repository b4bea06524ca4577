"""The core routes over a fleet: each Release names a backend within its per-backend cap;
a backend failure before the first token fails over, after it only with resume, and
otherwise ends in Abandon; a refused shared lease queues the request again."""

from __future__ import annotations

from pathlib import Path

import pytest

from burstguard.core.fleet.fleet import Fleet
from burstguard.core.fleet.state import BackendState
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.core import GatewayCore
from burstguard.core.gateway.events import (
    Abandon,
    Arrive,
    BackendFailed,
    Circuit,
    Effect,
    Finish,
    FirstToken,
    LeaseRefused,
    Reject,
    Release,
    Scrape,
    Tick,
)
from burstguard.core.gateway.request import GatewayRequest
from burstguard.errors import BurstguardError
from burstguard.live.gateway.sources import parse_backend_file

A, B = "http://a:1", "http://b:1"


def core(
    resume: bool = False, per_backend: int = 2, resume_b: bool = False, **fleet: object
) -> GatewayCore:
    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A, "resume": resume}, {"url": B, "resume": resume_b}],
        "classes": [{"name": "standard", "rank": 0}],
        "admission": {"adapt": False, "min_in_flight": 1,
                      "max_in_flight_per_backend": per_backend},
        "fleet": {"router": {"policy": "round_robin"}, **fleet},
    })  # fmt: skip
    return GatewayCore(cfg)


def arrive(gw: GatewayCore, i: int, now: float = 0.0) -> list[Effect]:
    return gw.handle(Arrive(GatewayRequest(f"r{i}", now, 100, 50)), now)


def releases(effects: list[Effect]) -> list[tuple[str, str | None]]:
    return [(e.req.id, e.backend) for e in effects if isinstance(e, Release)]


def test_releases_name_backends_within_their_caps() -> None:
    gw = core(per_backend=2)
    out = [r for i in range(6) for r in releases(arrive(gw, i))]
    assert sorted(b for _, b in out) == [A, A, B, B]  # two each, two wait
    assert gw.stats.queue_depth["standard"] == 2
    assert releases(gw.handle(Finish(out[0][0], 50), 1.0)) == [("r4", out[0][1])]


def test_failure_before_the_first_token_fails_over_after_it_abandons() -> None:
    gw = core()
    (rid, first), = releases(arrive(gw, 0))  # fmt: skip
    out = gw.handle(BackendFailed(rid, "connect"), 0.1)
    (e,) = [x for x in out if isinstance(x, Release)]
    assert (e.backend, e.failover, e.resumed) == ({A, B}.difference({first}).pop(), True, False)
    out = gw.handle(BackendFailed(rid, "reset", started=True), 0.2)
    assert [type(x) for x in out] == [Abandon] and out[0].outcome == "not_retryable"  # type: ignore[union-attr]
    assert gw.stats.outcomes["standard"]["failed"] == 1
    assert gw.stats.in_flight_requests == 0


def test_with_resume_a_started_stream_goes_on_only_where_it_is_resumed() -> None:
    gw = core(resume=True, resume_b=True)
    (rid, first), = releases(arrive(gw, 0))  # fmt: skip
    out = gw.handle(BackendFailed(rid, "reset", started=True), 0.1)
    (e,) = [x for x in out if isinstance(x, Release)]
    assert e.resumed and e.failover and e.backend != first
    gw = core(resume=True)  # B would start it over: its client would read it twice
    (rid, first), = releases(arrive(gw, 0))  # fmt: skip
    assert first == A
    out = gw.handle(BackendFailed(rid, "reset", started=True), 0.1)
    assert [type(x) for x in out] == [Abandon] and out[0].outcome == "no_backend"  # type: ignore[union-attr]


def test_the_retry_budget_bounds_failovers() -> None:
    gw = core(retry_budget={"ratio": 0.0, "min_concurrency": 0})
    (rid, _), = releases(arrive(gw, 0))  # fmt: skip
    out = gw.handle(BackendFailed(rid, "status_5xx"), 0.1)
    assert [type(x) for x in out] == [Abandon] and out[0].outcome == "budget"  # type: ignore[union-attr]


def test_a_refused_lease_requeues_and_holds_that_backend_for_a_tick() -> None:
    gw = core(per_backend=1)
    (rid, first), = releases(arrive(gw, 0))  # fmt: skip
    out = gw.handle(LeaseRefused(rid), 0.0)
    assert releases(out) == [(rid, {A, B}.difference({first}).pop())]  # the other one
    (rid2, _), = releases(arrive(gw, 1)) or [("none", None)]  # fmt: skip
    assert rid2 == "none"  # the refused backend is held at its load (0): nothing goes there
    assert releases(gw.handle(Tick(), 0.2)) == [("r1", first)]  # the hold ended


def test_a_resumed_stream_whose_lease_is_refused_is_still_resumed_when_released_again() -> None:
    """A started stream fails over (resumed) and the other gateways hold that backend's
    shared cap: queued again, its next release must still resume it. Released as new,
    the shell sent the whole request again and its client got the first tokens twice
    (the chaos run, seed 3: four streams with max_tokens + 23 tokens, logged completed)."""
    gw = core(resume=True, per_backend=1, resume_b=True)
    (rid, first), = releases(arrive(gw, 0))  # fmt: skip
    assert first == A
    gw.handle(FirstToken(rid), 0.05)
    out = gw.handle(BackendFailed(rid, "reset", started=True), 0.1)
    (moved,) = [x for x in out if isinstance(x, Release)]
    assert moved.resumed and moved.failover
    out = gw.handle(LeaseRefused(rid), 0.1)  # the other gateways hold its cap there
    again = [x for x in out if isinstance(x, Release)]
    for t in (0.2, 0.3, 0.4):
        again += [x for x in gw.handle(Tick(), t) if isinstance(x, Release)]
    assert [(x.req.id, x.resumed) for x in again[:1]] == [(rid, True)]


def test_each_backend_has_its_own_adaptive_cap() -> None:
    """A backend whose engine queues (two scrapes in a row) has its cap cut to what it
    runs; the other keeps its own."""
    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A}, {"url": B}],
        "classes": [{"name": "standard", "rank": 0}],
        "admission": {"min_in_flight": 1, "max_in_flight_per_backend": 4},
    })  # fmt: skip
    gw = GatewayCore(cfg)
    for i in range(8):
        arrive(gw, i)
    calm, queued = BackendState(0, 4, 0.1), BackendState(2, 2, 0.5)
    for t in (0.0, 0.3):
        gw.handle(Scrape(queued, A), t)
        gw.handle(Scrape(calm, B), t)
    caps = {v.url: v.cap for v in gw.fleet.views(0.3)}  # type: ignore[union-attr]
    assert caps == {A: 2, B: 4}


def test_an_outage_of_every_backend_sheds_the_queue_instead_of_holding_it_forever() -> None:
    """A class with no queue deadline used to wait for ever while every backend was down
    (the client's connection held, no answer). After `max_outage_wait_s` with no healthy
    backend, queued and new requests get 429 no_backend with a Retry-After; a backend
    that answers its probes again ends the outage."""
    gw = core(health={"max_outage_wait_s": 1.0, "open_s": 0.5})
    assert gw.fleet is not None
    for url in (A, B):
        for t in (0.0, 0.01, 0.02):  # the failure threshold (3): both circuits open
            gw.fleet.on_probe(url, False, t)
    assert arrive(gw, 0, now=0.1) == []  # queued: no backend may take it
    changes = gw.handle(Tick(), 0.5)  # within the bound it waits; the log hears of both
    assert changes == [Circuit(A, "open"), Circuit(B, "open")]
    (shed,) = [e for e in gw.handle(Tick(), 1.2) if not isinstance(e, Circuit)]
    assert isinstance(shed, Reject) and shed.reason == "no_backend" and shed.req.id == "r0"
    assert shed.retry_after_s >= 1.0
    (now,) = arrive(gw, 1, now=1.3)  # refused at once while the outage lasts
    assert isinstance(now, Reject) and now.reason == "no_backend"
    assert gw.stats.queue_depth["standard"] == 0 and gw.stats.rejections["no_backend"] == 2
    for t in (1.6, 1.7):  # half-open: two good probes close A's circuit
        gw.fleet.on_probe(A, True, t)
    assert releases(arrive(gw, 2, now=1.8)) == [("r2", A)]


def test_a_fleet_scaled_to_zero_is_not_an_outage() -> None:
    """No backend listed at all (scaling from zero: the first one is still starting):
    requests wait for it, bounded by their class's deadline only."""
    gw = core(health={"max_outage_wait_s": 1.0})
    assert gw.fleet is not None
    gw.fleet.set_backends((), 0.0)
    assert arrive(gw, 0, now=0.0) == []
    assert gw.handle(Tick(), 5.0) == [] and gw.stats.queue_depth["standard"] == 1


def discovered(tmp_path: Path, **options: object) -> tuple[GatewayConfig, tuple[str, ...]]:
    """A config whose backends come from a watched file only, with `options` for them;
    the URLs file discovery reads from it."""
    listing = tmp_path / "backends.txt"
    listing.write_text(f"{A}\n{B}  # two engines\n")
    cfg = GatewayConfig.from_dict({
        "classes": [{"name": "interactive", "rank": 0},
                    {"name": "batch", "rank": 1, "preemptible": True}],
        "default_class": "interactive",
        "admission": {"adapt": False, "min_in_flight": 1, "max_in_flight_per_backend": 1},
        "fleet": {"discovery": {"file": {"path": str(listing)}, "options": options}},
    })  # fmt: skip
    return cfg, parse_backend_file(listing.read_text(), str(listing))


def batch(i: int) -> GatewayRequest:
    return GatewayRequest(f"b{i}", 0.0, 100, 50, "batch")


def test_discovered_backends_take_discoverys_options_preempt_and_forward_priority(
    tmp_path: Path,
) -> None:
    """Backends from file discovery resume and forward priority as their options say;
    the core read both switches from a static entry, so with discovery both were off."""
    cfg, urls = discovered(tmp_path, resume=True, forward_priority=True)
    gw = GatewayCore(cfg, Fleet(cfg.fleet, urls))
    out = [x for i in range(2) for x in gw.handle(Arrive(batch(i)), 0.0)]
    released = sorted((e.backend, e.priority) for e in out if isinstance(e, Release))
    assert released == [(A, 1), (B, 1)]
    out = gw.handle(Arrive(GatewayRequest("i0", 0.1, 100, 50, "interactive")), 0.1)
    assert [type(e).__name__ for e in out] == ["Preempt", "Release"]
    assert isinstance(out[1], Release) and out[1].priority == 0
    rid = out[1].req.id
    out = gw.handle(BackendFailed(rid, "reset", started=True), 0.2)  # it may resume
    assert [(type(e).__name__, e.req.id) for e in out][-1] == ("Release", rid)
    cfg, urls = discovered(tmp_path)  # no options: the defaults, neither switch
    gw = GatewayCore(cfg, Fleet(cfg.fleet, urls))
    out = [x for i in range(2) for x in gw.handle(Arrive(batch(i)), 0.0)]
    assert all(e.priority is None for e in out if isinstance(e, Release))
    out = gw.handle(Arrive(GatewayRequest("i0", 0.1, 100, 50, "interactive")), 0.1)
    assert out == []  # queued: nothing may be preempted


def test_the_live_gateway_counts_prompts_with_discoverys_tokenizer(tmp_path: Path) -> None:
    """The discovered backends' tokenizer counts prompts (a bad path is refused at start,
    as for a static backend); the shell reads their other settings from the core."""
    from burstguard.live.gateway.server import Gateway

    cfg, urls = discovered(tmp_path, tokenizer=str(tmp_path / "missing.json"))
    with pytest.raises(BurstguardError, match="cannot load a tokenizer"):
        Gateway(cfg)
    cfg, urls = discovered(tmp_path, resume=True, read_timeout_s=7.0)
    gw = Gateway(cfg)
    opts = gw.core.backend_options(urls[0])
    assert opts.resume and opts.read_timeout_s == 7.0 and opts.url == urls[0]


def test_a_stream_queued_again_mid_answer_is_never_shed_with_a_429() -> None:
    """A's stream fails mid-answer (its circuit opens) with B full: queued to resume.
    Past its class's queue deadline, or when a higher class needs its queue place, it
    stays (its client holds part of the answer; a 429 cannot be sent on a started stream:
    the live gateway cut the client's connection without the stream's end)."""
    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A, "resume": True}, {"url": B, "resume": True}],
        "classes": [{"name": "interactive", "rank": 0},
                    {"name": "batch", "rank": 1, "queue_deadline_s": 1.0}],
        "admission": {"adapt": False, "min_in_flight": 1, "max_in_flight_per_backend": 1,
                      "max_queue_requests": 1},
        "default_class": "batch",
        "fleet": {"router": {"policy": "round_robin"},
                  "health": {"failure_threshold": 1, "open_s": 60.0}},  # A stays out
    })  # fmt: skip
    gw = GatewayCore(cfg)

    def batch(i: int, now: float) -> list[Effect]:
        return gw.handle(Arrive(GatewayRequest(f"r{i}", now, 100, 50, "batch")), now)

    assert releases(batch(0, 0.0)) == [("r0", A)]
    assert releases(batch(1, 0.0)) == [("r1", B)]
    gw.handle(FirstToken("r0"), 0.05)
    out = gw.handle(BackendFailed("r0", "reset", started=True), 0.1)
    assert not releases(out) and gw.stats.queue_depth["batch"] == 1  # B is full: it waits
    out = gw.handle(Tick(), 5.0)  # past 2 x its class's queue deadline
    assert not [x for x in out if isinstance(x, (Reject, Abandon))]
    vip = GatewayRequest("v", 5.0, 100, 50, "interactive")
    out = gw.handle(Arrive(vip), 5.0)  # the queue is full: the newcomer is refused, not r0
    assert [(x.req.id, type(x)) for x in out] == [("v", Reject)]
    (again,) = [x for x in gw.handle(Finish("r1", 50), 5.1) if isinstance(x, Release)]
    assert (again.req.id, again.backend, again.resumed) == ("r0", B, True)
    assert gw.stats.outcomes["batch"]["rejected"] == 0
