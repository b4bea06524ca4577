"""The fidelity table's reference: one real run as measured; several (each on a fresh
server) by their median, with their range beside it."""

from __future__ import annotations

from typing import Any

import pytest

from burstguard.calibrate.fidelity import METRICS, markdown, pair_up


def legs(value: float) -> dict[str, dict[str, Any]]:
    return {"w": {key: {q: value for _, q in METRICS} for key, _ in METRICS}}


def test_one_real_run_is_the_reference() -> None:
    rows = pair_up([legs(1.0)], legs(1.1))
    assert len(rows) == len(METRICS)
    assert all(r.real_range is None and r.rel_error == pytest.approx(0.1) for r in rows)
    assert "range" not in markdown(rows)


def test_several_real_runs_compare_with_their_median_and_show_their_spread() -> None:
    rows = pair_up([legs(1.0), legs(1.4), legs(1.1)], legs(1.1))
    assert all(r.real_s == 1.1 and r.real_range == (1.0, 1.4) for r in rows)
    assert all(r.rel_error == pytest.approx(0.0) for r in rows)
    table = markdown(rows).splitlines()
    assert table[0].count("|") == table[1].count("|") == table[2].count("|") == 7
    assert "1.000-1.400 s" in table[2]
