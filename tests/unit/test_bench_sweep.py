"""The sweep's pure parts: the knee from synthetic points (clean, noisy, closed loop), each
point's figures over its window only, the sweep spec and flags, sweep.json."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from burstguard.report.sweep import (
    Point,
    StopRule,
    SweepSpec,
    Window,
    find_knee,
    knee_of,
    plan_sweep,
    point_from_records,
    read_sweep,
    sweep_doc,
    write_sweep,
)
from burstguard.wire.records import RequestRecord
from burstguard.wire.summary import Slo

RULE = StopRule(min_slo_attainment=0.9, max_error_rate=0.05)


def point(load: float, achieved: float, attainment: float = 1.0, errors: int = 0) -> Point:
    return Point(
        load=load, requests=100, offered_rps=load, achieved_rps=achieved,
        output_tokens_per_s=achieved * 100, ttft_p50_s=0.1, ttft_p95_s=0.2, tpot_p50_s=0.01,
        tpot_p95_s=0.02, slo_attainment=attainment, errors=errors, unfinished=0,
        schedule_lag_p99_s=0.001,
    )  # fmt: skip


def open_loop(capacity: float, loads: list[float], noise: float = 0.0, seed: int = 0) -> list:
    """Achieved = offered up to `capacity`, then flat; attainment falls once queueing
    starts (above capacity); +-noise (relative) on throughput."""
    rng = random.Random(seed)
    return [
        point(x, min(x, capacity) * (1 + rng.uniform(-noise, noise)),
              1.0 if x <= capacity else max(0.0, 1 - (x - capacity)))
        for x in loads
    ]  # fmt: skip


def test_the_knee_is_the_last_load_within_the_slo() -> None:
    knee = find_knee(open_loop(4.0, [1, 2, 3, 4, 5, 6]), RULE)
    assert (knee.load, knee.bounded) == (4, True)
    assert knee.limited_by == ["slo", "throughput"] and "the next load 5 misses" in knee.reason
    late = [point(x, x, 1.0 if x < 3 else 0.5) for x in (1, 2, 3, 4)]  # the SLO breaks first
    assert (find_knee(late, RULE).load, find_knee(late, RULE).limited_by) == (2, ["slo"])


def test_a_loose_slo_leaves_the_throughput_to_decide() -> None:
    """Attainment stays met: the knee is the last rate the server kept up with, and the
    reason says what the next one finished of what it was offered."""
    pts = [point(x, min(x, 4.0)) for x in (1, 2, 3, 4, 5, 6, 8)]
    knee = find_knee(pts, RULE, "rate")
    assert knee.load == 4 and knee.limited_by == ["throughput"]
    assert "5 finished 4.00 of 5.00 req/s offered (80% < 90%)" in knee.reason


@pytest.mark.parametrize("seed", range(200))
def test_noise_of_5_percent_does_not_move_the_knee(seed: int) -> None:
    pts = open_loop(4.0, [1, 2, 3, 4, 5, 6, 8], noise=0.05, seed=seed)
    for p in pts:
        p.slo_attainment = 1.0
    assert find_knee(pts, RULE, "rate").load == 4
    users = [point(c, min(c, 8) * (1 + random.Random(seed * 7 + c).uniform(-0.05, 0.05)))
             for c in (1, 2, 4, 8, 16, 32)]  # fmt: skip
    assert find_knee(users, RULE, "concurrency").load == 8


def test_an_open_loop_rate_is_judged_by_what_its_window_offered() -> None:
    """Measured on the emulator (docs/bench.md): the Poisson schedule at a nominal 0.5
    req/s held 0.29 req/s in the window, all of it served; against the nominal rate that
    would read as falling behind."""
    measured = ((0.5, 0.29, 0.29), (1, 0.83, 0.85), (1.5, 1.38, 1.38), (2, 1.77, 1.75))
    pts = [point(x, a) for x, _, a in measured]
    for p, (_, offered, _) in zip(pts, measured, strict=True):
        p.offered_rps = offered
    knee = find_knee(pts, RULE, "rate")
    assert (knee.load, knee.bounded) == (2, False)


def test_closed_loop_users_saturate_at_the_engine_batch() -> None:
    """Measured on the emulator (smollm2-135m-cpu, --max-num-seqs 4, docs/bench.md): each
    step slows with the batch, so 2 -> 3 users gained only 20% for +50%, yet throughput
    grew until the 4 sequences were full; 6 and 8 users only queue (TTFT p95 x3)."""
    measured = ((1, 1.08), (2, 1.67), (3, 2.00), (4, 2.29), (6, 2.33), (8, 2.33))
    knee = find_knee([point(c, a) for c, a in measured], RULE, "concurrency")
    assert knee.load == 4 and "6 gave 2.33 req/s vs 2.29 (+2% for +50% load)" in knee.reason


def test_one_noisy_dip_does_not_end_the_growth_nor_a_bump_past_saturation_restart_it() -> None:
    dip = [point(x, a) for x, a in ((1, 1), (2, 2), (3, 1.9), (4, 4), (5, 4), (6, 4))]
    assert find_knee(dip, RULE, "concurrency").load == 4
    bump = [point(x, a) for x, a in ((1, 1), (2, 2), (3, 3), (4, 4), (5, 4.1), (6, 4.4), (8, 4))]
    assert find_knee(bump, RULE, "concurrency").load == 4


def test_no_knee_when_even_the_lowest_load_misses_and_unbounded_when_none_is_reached() -> None:
    low = find_knee(open_loop(0.5, [1, 2, 3]), RULE)
    assert low.load is None and "even the lowest load 1 misses" in low.reason
    behind = [point(x, 0.5 * x) for x in (1, 2)]
    assert find_knee(behind, RULE).reason.startswith("even the lowest load 1 falls behind")
    high = find_knee(open_loop(10.0, [1, 2, 3]), RULE)
    assert (high.load, high.bounded, high.limited_by) == (3, False, [])
    assert "raise its top" in high.reason


def test_errors_above_the_bound_end_the_sweep_and_bound_the_knee() -> None:
    pts = [point(1, 1), point(2, 2), point(3, 2.9, errors=10)]
    knee = find_knee(pts, RULE)
    assert knee.load == 2 and "errors 10.0% > 5.0%" in knee.reason
    assert RULE.miss(pts[2]) == "errors 10.0% > 5.0%"


def rec(i: int, scheduled: float, e2e: float = 0.5, error: str | None = None) -> RequestRecord:
    return RequestRecord(id=f"r{i}", scheduled_s=scheduled, sent_s=scheduled, status=200,
                         error=error, ttft_s=e2e / 5, e2e_s=e2e, completion_tokens=10)  # fmt: skip


def test_a_point_counts_its_window_only() -> None:
    """Warm-up and cool-down requests are out of every figure; throughput counts what
    ended inside the window (a backlog ending after it is not throughput); a request the
    drain cut is unfinished (an SLO miss), not an error."""
    window = Window(duration_s=10, warmup_s=2, cooldown_s=2)
    records = [rec(0, 0.5, e2e=3.0), rec(1, 1.0)]  # warm-up: out, but #0 ends in window
    records += [rec(2 + i, 2.0 + i, e2e=0.5) for i in range(6)]  # 2..7: in
    records += [rec(8, 7.5, e2e=5.0), rec(9, 7.9, error="cancelled")]  # in, ends after
    records += [rec(10, 8.5), rec(11, 9.0, error="http_500")]  # cool-down: out
    p = point_from_records(3.0, records, window, Slo(ttft_s=0.5, tpot_s=0.5))
    assert p.requests == 8 and p.offered_rps == 8 / 6
    assert p.achieved_rps == 7 / 6  # #0 and #2..#7 ended inside; #8 after
    assert (p.errors, p.unfinished) == (0, 1)
    assert p.slo_attainment == 6 / 8  # #8's TTFT (1 s) and the cut #9 miss


def test_sweep_spec_lists_ranges_and_refusals() -> None:
    assert SweepSpec.parse("rate=4,1,2").values == (1, 2, 4)
    assert SweepSpec.parse("rate=0.5:2:0.5").values == (0.5, 1.0, 1.5, 2.0)
    assert SweepSpec.parse("concurrency=1:4:1").unit == "users"
    for bad, says in (
        ("rps=1,2", "expected rate=A,B"), ("rate=a,b", "not a list or range"),
        ("rate=0,1", "must be > 0"), ("concurrency=1.5,2", "whole number"),
        ("rate=1,1", "appears twice"), ("rate=4:1:1", "STOP >= START"),
        ("rate=1:1000:1", "at most 64"), ("rate=", "no loads"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            SweepSpec.parse(bad)


def test_plan_sweep_checks_the_flags_together() -> None:
    kw = dict(duration_s=30.0, rate_given=False, pattern=None, warmup_s=None,
              cooldown_s=None, ramp_up_s=5.0, rule=(0.9, 0.05), conflicts={})  # fmt: skip
    _, window, _, pattern = plan_sweep("rate=1,2", **kw)  # type: ignore[arg-type]
    assert (window.warmup_s, window.cooldown_s, pattern) == (3.0, 3.0, "poisson")
    _, window, _, _ = plan_sweep("concurrency=1,2", **kw)  # type: ignore[arg-type]
    assert window.warmup_s == 5.0  # the closed loop's users are all running
    for change, says in (
        ({"conflicts": {"--workload": True}}, "not with --workload"),
        ({"rate_given": True}, "drop --rate"),
        ({"warmup_s": 20.0, "cooldown_s": 10.0}, "leave nothing"),
        ({"rule": (1.5, 0.05)}, "--stop-below-slo 1.5"),
    ):
        with pytest.raises(ValueError, match=says):
            plan_sweep("rate=1", **{**kw, **change})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="drop --pattern"):
        plan_sweep("concurrency=1", **{**kw, "pattern": "burst"})  # type: ignore[arg-type]


def test_sweep_json_round_trips_and_gives_its_knee(tmp_path: Path) -> None:
    spec = SweepSpec.parse("rate=1,2,3,4,5")
    doc = sweep_doc(spec, open_loop(3.0, list(spec.values)), RULE,
                    window=Window(30, 3, 3), slo=Slo())  # fmt: skip
    write_sweep(tmp_path / "sweep.json", doc)
    back = read_sweep(tmp_path)
    assert back["schema"] == "burstguard.sweep/1" and back["points"][0]["error_rate"] == 0
    assert knee_of(back, tmp_path) == ("rate", 3.0)
    with pytest.raises(ValueError, match="no such file"):
        read_sweep(tmp_path / "none")
    (tmp_path / "x.json").write_text('{"schema": "burstguard.summary/1"}')
    with pytest.raises(ValueError, match="not a burstguard sweep"):
        read_sweep(tmp_path / "x.json")
    none = sweep_doc(spec, open_loop(0.1, [1.0]), RULE, window=Window(30, 3, 3), slo=Slo())
    with pytest.raises(ValueError, match="found no knee"):
        knee_of(none, tmp_path)


def test_the_report_draws_the_sweep_with_its_knee(tmp_path: Path) -> None:
    from burstguard.report.html import render_sweep

    spec = SweepSpec.parse("rate=1,2,3,4,5")
    doc = sweep_doc(spec, open_loop(3.0, list(spec.values)), RULE,
                    window=Window(30, 3, 3), slo=Slo())  # fmt: skip
    page = render_sweep(doc, "t")
    assert "plot-sweep" in page and "knee 3 req\\u002fs" in page  # plotly escapes /
    assert "Knee: 3 req/s (the next load 4 misses" in page
