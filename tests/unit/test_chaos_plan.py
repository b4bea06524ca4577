"""The chaos run's fault plan (`tests/chaos.py`): seeded, every kind, inside the run's
middle, and never more down at once than the fleet can absorb (two engines of three, one
gateway of two, one Redis)."""

from __future__ import annotations

import pytest
from tests.chaos import N_ENGINES, Fault, fault_plan


@pytest.mark.parametrize("duration", [45.0, 180.0, 300.0])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_plan_is_seeded_complete_and_absorbable(duration: float, seed: int) -> None:
    plan = fault_plan(duration, seed)
    assert plan == fault_plan(duration, seed)
    assert plan != fault_plan(duration, seed + 100)
    assert {f.kind for f in plan} == {"engine_kill", "engine_stop", "gateway_restart", "redis_kill"}
    assert sum(f.kind.startswith("engine") for f in plan) >= duration / 15 - 1
    assert all(0.1 * duration <= f.at_s <= 0.8 * duration for f in plan)

    def down(f: Fault, t: float) -> bool:  # a fault's span: its hold + 8 s to come back
        return f.at_s <= t <= f.at_s + f.hold_s + 8.0

    for t in [x / 10 for x in range(int(duration * 10))]:
        now = [f for f in plan if down(f, t)]
        engines = {f.target for f in now if f.kind.startswith("engine")}
        assert len(engines) <= 2 < N_ENGINES
        assert sum(f.kind.startswith("engine") for f in now) == len(engines)  # one fault each
        assert sum(f.kind == "gateway_restart" for f in now) <= 1
        assert sum(f.kind == "redis_kill" for f in now) <= 1
