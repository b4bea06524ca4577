"""Hung backends, decided by the core (`config.DeadlineConfig`): a request with no first
token by max(floor, factor x predicted TTFT) fails over as a refused one does; a started
stream silent for `stall_s` resumes elsewhere (or ends with an error where it cannot); a
backend whose circuit opens has what it holds moved at once; a slow but healthy prefill,
predicted from the work ahead and the backend's learned rate, is not cut."""

from __future__ import annotations

from typing import Any

import pytest

from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.gateway.core import GatewayCore
from burstguard.core.gateway.events import (
    Abandon,
    Abort,
    Arrive,
    Circuit,
    Effect,
    Finish,
    FirstToken,
    Release,
    Tick,
)
from burstguard.core.gateway.failure import Failure
from burstguard.core.gateway.request import GatewayRequest

A, B = "http://a:1", "http://b:1"


def core(resume: bool = True, **deadlines: Any) -> GatewayCore:
    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A, "resume": resume}, {"url": B, "resume": resume}],
        "classes": [{"name": "standard", "rank": 0},
                    {"name": "interactive", "rank": 1, "first_token_floor_s": 0.5}],
        "admission": {"adapt": False, "min_in_flight": 1, "max_in_flight_per_backend": 8},
        "fleet": {"router": {"policy": "round_robin"}},
        "backend_deadlines": {"first_token_floor_s": 2.0, "first_token_factor": 4.0,
                              "prefill_tokens_per_s": 1000.0, "stall_s": 3.0, **deadlines},
    })  # fmt: skip
    return GatewayCore(cfg)


def send(gw: GatewayCore, rid: str, prompt: int = 100, now: float = 0.0, **kw: Any) -> str:
    req = GatewayRequest(rid, now, prompt, 50, **kw)
    (r,) = [e for e in gw.handle(Arrive(req), now) if isinstance(e, Release)]
    return r.backend


def moves(effects: list[Effect]) -> list[tuple[str, str, str | None]]:
    """(request, what, where) for each Abort / Release / Abandon, in order."""
    out: list[tuple[str, str, str | None]] = []
    for e in effects:
        if isinstance(e, Abort):
            out.append((e.req.id, e.failure.name, None))
        elif isinstance(e, Release):
            out.append((e.req.id, "resumed" if e.resumed else "release", e.backend))
        elif isinstance(e, Abandon):
            out.append((e.req.id, "abandon", e.outcome))
    return out


def test_no_first_token_by_the_floor_fails_over_at_the_floor_not_before() -> None:
    gw = core()
    first = send(gw, "r0")  # 100 tokens at 1000/s: 0.4 s x 4 < the 2 s floor
    other = B if first == A else A
    assert gw.first_token_deadline("r0") == 2.0
    assert moves(gw.handle(Tick(), 1.95)) == []
    out = gw.handle(Tick(), 2.0)
    assert moves(out) == [("r0", "NO_FIRST_TOKEN", None), ("r0", "release", other)]
    assert gw.fleet.stats(2.0)[0].failures == {"timeout": 1}  # the breaker counts it


def test_the_deadline_grows_with_the_prefill_work_ahead_on_the_backend() -> None:
    """A long prompt, and prompts sent to the same backend before it with no first token
    yet, push its deadline out: a burst of long prefills is not cut for queueing."""
    gw = core()
    send(gw, "long", prompt=4000)  # 4 s predicted: deadline 16 s
    assert gw.first_token_deadline("long") == 16.0
    send(gw, "other", prompt=100)  # the other backend (round robin)
    send(gw, "behind", prompt=1000)  # behind "long": (4000 + 1000) / 1000 x 4
    assert gw.first_token_deadline("behind") == 20.0
    gw.handle(FirstToken("long"), 4.0)  # done (at the prior's rate): no longer ahead there
    send(gw, "later", prompt=100, now=4.0)
    send(gw, "later2", prompt=100, now=4.0)
    got = sorted(gw.first_token_deadline(r) or 0 for r in ("later", "later2"))
    assert got == pytest.approx([4.0 + 2.0, 4.0 + 4 * (1000 + 100) / 1000])


def test_a_slow_backend_learns_its_rate_so_a_slow_healthy_prefill_is_not_cut() -> None:
    """The prior (1000 tokens/s) says 4 s for 4000 tokens; the backend took 10 s for
    2000: it is learned at 5 ms a token, so the next long prompt gets 4 x 20 s."""
    gw = core()
    url = send(gw, "warm", prompt=2000)
    gw.handle(FirstToken("warm"), 10.0)  # 10 s: past 4 x 2 s, had it been a constant 8 s
    gw.handle(Finish("warm", 50), 11.0)
    send(gw, "x", now=11.0)  # round robin: the other backend
    send(gw, "long", prompt=4000, now=11.0)
    assert gw.fleet.backend_of("long") == url
    assert gw.first_token_deadline("long") == 11.0 + 4 * 4000 * 0.005
    out = moves(gw.handle(Tick(), 11.0 + 30.0))  # 30 s of prefill: "long" still waits
    assert [rid for rid, _, _ in out] == ["x", "x"]  # ("x" had the prior's 2 s floor)


def test_a_class_has_its_own_floor() -> None:
    gw = core()
    send(gw, "i", priority_class="interactive")
    assert gw.first_token_deadline("i") == 0.5


def test_a_started_stream_silent_for_stall_s_resumes_elsewhere() -> None:
    gw = core()
    first = send(gw, "s")
    gw.handle(FirstToken("s"), 0.5)
    for t in (1.0, 2.0, 3.0):
        assert moves(gw.handle(Tick(progressed=["s"]), t)) == []
    assert moves(gw.handle(Tick(), 5.9)) == []  # 2.9 s since its last progress
    out = gw.handle(Tick(), 6.0)
    other = B if first == A else A
    assert moves(out) == [("s", "STALLED", None), ("s", "resumed", other)]


def test_a_stalled_stream_that_cannot_resume_ends_with_an_error() -> None:
    gw = core(resume=False)
    send(gw, "s")
    gw.handle(FirstToken("s"), 0.5)
    out = gw.handle(Tick(), 3.5)
    assert moves(out) == [("s", "STALLED", None), ("s", "abandon", "not_retryable")]
    assert gw.stats.outcomes["standard"]["failed"] == 1 and gw.stats.in_flight_requests == 0


def test_a_non_streamed_answer_gets_time_for_its_whole_answer() -> None:
    """Silent until whole: its deadline adds max_tokens at the decode prior (10/s)."""
    gw = core()
    send(gw, "j", stream=False)  # 4 x (0.1 + 50 / 10) s
    assert gw.first_token_deadline("j") == 4 * (0.1 + 5.0)


def test_when_a_circuit_opens_what_it_holds_moves_at_once() -> None:
    gw = core()
    sent = {rid: send(gw, rid) for rid in ("a", "b", "c", "d")}
    gw.handle(FirstToken("c"), 0.2)  # a started stream: resumed elsewhere (resume: true)
    victim = sent["a"]
    for t in (0.3, 0.31, 0.32):
        gw.fleet.on_probe(victim, False, t)  # its /health stops answering
    out = gw.handle(Tick(), 0.35)
    assert Circuit(victim, "open") in out
    moved = {rid for rid, what, _ in moves(out) if what == "CIRCUIT_OPEN"}
    assert moved == {rid for rid, url in sent.items() if url == victim}
    assert all(where != victim for _, what, where in moves(out) if where is not None)


def test_off_nothing_is_cut() -> None:
    gw = core(enabled=False)
    send(gw, "r0")
    assert gw.first_token_deadline("r0") is None
    assert moves(gw.handle(Tick(), 1e6)) == []


def test_failure_kinds_decided_by_the_core() -> None:
    assert (Failure.NO_FIRST_TOKEN.status, Failure.STALLED.status) == (504, 504)
    assert Failure.CIRCUIT_OPEN.reason == "circuit_open"
    assert Failure.STALLED.error()["error"]["code"] == "backend_stalled"


def test_a_drain_answers_the_queue_and_cuts_what_is_open_at_its_end() -> None:
    """SIGTERM (`Drain(until)`): queued requests that cannot finish by then are rejected
    `shutdown` (503), new arrivals too; at `until` what is in flight is aborted and
    abandoned (`shutdown`): failed, not cancelled."""
    from burstguard.core.gateway.events import Drain, Reject
    from burstguard.wire.outcomes import Reason

    cfg = GatewayConfig.from_dict({
        "backends": [{"url": A}], "classes": [{"name": "standard", "rank": 0}],
        "admission": {"adapt": False, "min_in_flight": 1, "max_in_flight": 1},
    })  # fmt: skip
    gw = GatewayCore(cfg)
    for i in range(3):  # one in flight, two queued; 50 tokens at the 10/s prior: 5 s each
        gw.handle(Arrive(GatewayRequest(f"r{i}", 0.0, 100, 50)), 0.0)
    out = gw.handle(Drain(until=2.0), 0.5)
    assert sorted((e.req.id, e.reason) for e in out if isinstance(e, Reject)) == [
        ("r1", Reason.SHUTDOWN), ("r2", Reason.SHUTDOWN)]  # fmt: skip
    (late,) = gw.handle(Arrive(GatewayRequest("r3", 1.0, 100, 50)), 1.0)
    assert isinstance(late, Reject) and late.reason == Reason.SHUTDOWN
    assert moves(gw.handle(Tick(), 1.9)) == []
    out = gw.handle(Tick(), 2.0)
    assert [type(e) for e in out] == [Abort, Abandon] and out[1].outcome == "shutdown"  # type: ignore[union-attr]
    outcomes = gw.stats.outcomes["standard"]
    assert (outcomes["rejected"], outcomes["failed"], outcomes["cancelled"]) == (3, 1, 0)
    assert gw.stats.rejections[Reason.SHUTDOWN] == 3
