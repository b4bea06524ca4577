"""Sessions and agent fan-out (`workload.sessions`): what the generators write, what the
format keeps, and the dependency rule the simulator applies (a turn never starts before
its predecessor has answered plus its think time; a step waits for all its calls)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.core.gateway.config import GatewayConfig
from burstguard.errors import ConfigError, FileError
from burstguard.sim.gateway_loop import simulate_gateway
from burstguard.sim.loop import simulate
from burstguard.wire.records import RequestRecord
from burstguard.workload.prompts import PromptRenderer, chat_content_tokens
from burstguard.workload.sessions import Dependencies, SessionShape
from burstguard.workload.spec import RequestSpec, Workload
from burstguard.workload.synth import PatternSpec, shape_pool, synthesize
from burstguard.workload.traces import load_workload, write_workload
from burstguard.workload.transform import merge, scale_rate, slice_window

H100 = Profile.load("llama3-8b-h100")
CONVERSATIONS = PatternSpec(
    pattern="poisson", rate=2.0, duration_s=10, seed=3, prompt_tokens="uniform:40-120",
    output_tokens="uniform:10-40", sessions=SessionShape(turns=(2, 4), think_s=(0.5, 1.5)),
)  # fmt: skip
AGENTS = PatternSpec(
    pattern="burst", rate=1.0, duration_s=20, seed=4, prompt_tokens="64", output_tokens="32",
    sessions=SessionShape(fan_out=4, steps=(3, 3), think_s=(0.2, 0.2)),
)  # fmt: skip


def by_session(workload: Workload) -> dict[str, list[RequestSpec]]:
    out: dict[str, list[RequestSpec]] = {}
    for spec in workload.specs():
        assert spec.session is not None
        out.setdefault(spec.session, []).append(spec)
    return out


def test_a_turn_is_the_previous_prompt_plus_its_answer_plus_new_text() -> None:
    workload = synthesize(CONVERSATIONS)
    sessions = by_session(workload)
    assert len(sessions) == workload.meta["sessions"] >= 10
    assert {len(turns) for turns in sessions.values()} <= {2, 3, 4}
    renderer = PromptRenderer()
    for turns in sessions.values():
        turns.sort(key=lambda s: s.turn or 0)
        for prev, turn in itertools.pairwise(turns):
            assert turn.after == (prev.id,) and 0.5 <= turn.think_s <= 1.5
            new = turn.prompt_tokens - prev.prompt_tokens - prev.max_tokens
            assert 40 <= new <= 120  # a --prompt-tokens draw of user text
            # the history is the text the previous turn sent: its blocks, then more
            assert turn.prefix_hashes[: len(prev.prefix_hashes)] == prev.prefix_hashes
            assert len(turn.prefix_hashes) == chat_content_tokens(turn.prompt_tokens) // 16
            assert turn.arrival_s == pytest.approx(prev.arrival_s + turn.think_s)
            full = len(prev.prefix_hashes) * 16 * 4
            old = renderer.text(prev, chat_content_tokens(prev.prompt_tokens))
            assert renderer.text(turn, chat_content_tokens(turn.prompt_tokens))[:full] == old[:full]
    first = {turns[0].prefix_hashes[0] for turns in sessions.values()}
    assert len(first) == len(sessions)  # no two sessions share blocks (no --shared-prefix)


def test_agent_steps_fan_out_over_one_context_and_join() -> None:
    workload = synthesize(AGENTS)
    for calls in by_session(workload).values():
        steps: dict[int, list[RequestSpec]] = {}
        for c in calls:
            steps.setdefault(c.turn or 0, []).append(c)
        assert sorted(steps) == [0, 1, 2] and {len(v) for v in steps.values()} == {4}
        for s in (1, 2):
            before = {c.id for c in steps[s - 1]}
            context = steps[s - 1][0].prompt_tokens - 64 + sum(c.max_tokens for c in steps[s - 1])
            for c in steps[s]:
                assert set(c.after) == before  # waits for all of the previous step
                assert c.prompt_tokens == context + 64
                assert c.prefix_hashes == steps[s][0].prefix_hashes  # one shared context
                assert c.prefix_hashes[: len(steps[s - 1][0].prefix_hashes)] == (
                    steps[s - 1][0].prefix_hashes
                )


def test_the_format_keeps_sessions_and_transforms_keep_them_whole(tmp_path: Path) -> None:
    workload = synthesize(AGENTS)
    path = tmp_path / "agents.jsonl"
    write_workload(path, workload)
    back = load_workload(path)
    assert list(back.specs()) == list(workload.specs())
    fast = scale_rate(back, 2.0)
    assert fast.think_s is not None and back.think_s is not None
    assert np.allclose(fast.think_s, back.think_s / 2)
    late = slice_window(back, 5.0, None)  # cuts some sessions' first steps off
    Dependencies(late)  # what is left waits only for what is left
    both = merge([back, synthesize(CONVERSATIONS)])
    assert Dependencies(both).roots and all(a.startswith(("0:", "1:")) for a in both.after[-1])
    text = path.read_text().replace('"after": ["a0-s0-c0"', '"after": ["nope"', 1)
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(FileError, match="no request 'nope'"):
        load_workload(tmp_path / "bad.jsonl")


def test_cycles_and_unknown_requests_are_refused() -> None:
    specs = [RequestSpec("a", 0.0, 10, 5, after=("b",)), RequestSpec("b", 0.0, 10, 5, after=("a",))]
    with pytest.raises(ConfigError, match="cycle"):
        Dependencies(Workload.from_specs(specs))
    with pytest.raises(ConfigError, match="not in the workload"):
        Dependencies(Workload.from_specs([RequestSpec("a", 0.0, 10, 5, after=("z",))]))


def test_release_waits_for_the_last_predecessor_plus_think_time() -> None:
    specs = [
        RequestSpec("x", 0.0, 10, 5, session="s"),
        RequestSpec("y", 0.0, 10, 5, session="s"),
        RequestSpec("z", 3.0, 10, 5, session="s", after=("x", "y"), think_s=0.5),
        RequestSpec("w", 5.0, 10, 5, session="t"),
    ]
    deps = Dependencies(Workload.from_specs(specs))
    assert deps.roots == [0, 1, 3] and deps.group == [0, 0, 0, 1]
    assert deps.ended(0, 1.0) == []  # y has not answered
    assert deps.ended(1, 4.0) == [(2, 4.5)]
    deps = Dependencies(Workload.from_specs(specs))
    deps.ended(0, 1.0)
    assert deps.ended(1, 2.0) == [(2, 3.0)]  # never before its arrival_s
    assert deps.mine((1, 2)) == [3]  # shard 1 of 2 sends session t, whole


def ends(records: list[RequestRecord]) -> dict[str, float]:
    return {r.id: r.scheduled_s + (r.e2e_s or 0.0) for r in records}


def check_order(workload: Workload, records: list[RequestRecord]) -> None:
    """Every request was sent at max(arrival, its predecessors' last end + think)."""
    end = ends(records)
    sent = {r.id: r.scheduled_s for r in records}
    assert len(sent) == len(workload) and all(r.ok for r in records)
    for spec in workload.specs():
        if spec.after:
            due = max(spec.arrival_s, max(end[a] for a in spec.after) + spec.think_s)
            assert sent[spec.id] == pytest.approx(due)
            assert sent[spec.id] > max(end[a] for a in spec.after)


def test_the_sim_sends_a_turn_only_after_its_predecessors_answered() -> None:
    for spec in (CONVERSATIONS, AGENTS):
        workload = synthesize(spec)
        result = simulate(workload, EngineConfig(max_num_seqs=8, enable_prefix_caching=True), H100)
        check_order(workload, result.records)
        queried, hit = result.prefix_cache
        assert hit / queried > 0.3  # the history is served from the cache


def test_the_gateway_sim_applies_the_same_rule() -> None:
    workload = synthesize(AGENTS)
    result = simulate_gateway(workload, EngineConfig(max_num_seqs=8), H100, GatewayConfig())
    check_order(workload, result.records)


def test_closed_loop_pools_ignore_sessions() -> None:
    pool = shape_pool(CONVERSATIONS)
    assert pool.after is None and pool.session is None
