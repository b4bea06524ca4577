"""The steady-vs-burst scenario is one rule (`workload.scenario`, docs/bench.md "Steady vs
burst: how the rate is matched"): `bench --scenario` and `sim --scenario` build both legs
with the same functions from the same inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer

from burstguard.bench.runner import BenchConfig
from burstguard.engine.config import EngineConfig
from burstguard.engine.profile import Profile
from burstguard.workload import scenario, seed
from burstguard.workload.synth import PatternSpec

SHAPES = PatternSpec(duration_s=60, seed=3, prompt_tokens="256", output_tokens="64")


class Stop(Exception):
    """Ends bench's scenario after its burst leg (no server, no compare)."""


def spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Records each call of the scenario's leg builders."""
    calls: list[tuple[str, Any]] = []
    steady, burst = scenario.steady_leg, scenario.burst_leg

    def steady_leg(spec: PatternSpec, rate: float | None, users: int | None) -> Any:
        calls.append(("steady", (spec, rate, users)))
        return steady(spec, rate, users)

    def burst_leg(spec: PatternSpec, rate: float) -> Any:
        calls.append(("burst", (spec, rate)))
        return burst(spec, rate)

    monkeypatch.setattr(scenario, "steady_leg", steady_leg)
    monkeypatch.setattr(scenario, "burst_leg", burst_leg)
    return calls


def bench_legs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rate: float | None) -> list:
    """bench's scenario with its legs faked: the steady one 'measures' 45 requests."""
    from burstguard.bench import cli

    sent: list[Any] = []

    def one_leg(config: Any, workload: Any, quiet: bool) -> dict[str, Any]:
        sent.append((config.concurrency, workload))
        if len(sent) == 2:
            raise Stop
        return {"requests": 45, "duration_s": 60.0, "interrupted": False}

    monkeypatch.setattr(cli, "_one_leg", one_leg)
    config = BenchConfig(target="http://x", model="m", out_dir=tmp_path / "bench")
    pattern = None if rate is None else PatternSpec(pattern="poisson", rate=rate, duration_s=60)
    with pytest.raises(Stop):
        cli._steady_vs_burst(config, SHAPES, pattern, None, True)
    return sent


def sim_legs(tmp_path: Path, rate: float | None) -> None:
    from burstguard.sim import cli

    setup = cli._Setup(Profile.load("llama3-8b-h100"), EngineConfig(), cli._slo("ttft=0.5"),
                       None, None)  # fmt: skip
    with pytest.raises(typer.Exit):
        cli._scenario(setup, tmp_path / "sim", SHAPES, rate, None, 0.0, None)


@pytest.mark.parametrize("rate", [None, 0.5])
def test_bench_and_sim_build_their_legs_with_the_same_functions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rate: float | None
) -> None:
    calls = spy(monkeypatch)
    sent = bench_legs(monkeypatch, tmp_path, rate)
    bench_calls, calls[:] = list(calls), []
    sim_legs(tmp_path, rate)
    sim_calls = list(calls)
    assert [c[0] for c in bench_calls] == [c[0] for c in sim_calls] == ["steady", "burst"]
    assert bench_calls[0] == sim_calls[0] == ("steady", (SHAPES, rate, None))
    assert bench_calls[1] == ("burst", (SHAPES, 45 / 60))  # requests sent / duration
    sim_steady = json.loads((tmp_path / "sim/steady/summary.json").read_text())
    assert sim_calls[1] == ("burst", (SHAPES, scenario.matched_rate(sim_steady)))
    users = seed.STEADY_USERS if rate is None else None
    assert sent[0][0] == users and sent[1][0] is None  # closed steady leg, open burst leg
    assert sim_steady["mode"] == ("closed" if rate is None else "open")


def test_the_legs_follow_the_documented_rule() -> None:
    closed = scenario.steady_leg(SHAPES, None, None)
    assert closed.users == seed.STEADY_USERS and closed.duration_s == 60
    assert scenario.steady_leg(SHAPES, None, 8).users == 8
    poisson = scenario.steady_leg(SHAPES, 2.0, 8)
    assert poisson.users is None and 80 < len(poisson.workload) < 160
    burst = scenario.burst_leg(SHAPES, 1.5)
    arrivals = np.asarray(burst.arrival_s)
    assert 0.7 < len(burst) / (1.5 * 60) < 1.3 and arrivals.max() < 60
    assert scenario.matched_rate({"requests": 90, "duration_s": 60.0}) == 1.5
