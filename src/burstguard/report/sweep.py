"""A load sweep's figures and its knee (`burstguard.sweep/1`): pure functions over records.

A sweep runs one bench leg per load (`bench.sweep_run`); here each leg's records become a
point measured over its steady window only (warm-up and cool-down left out: the first
seconds see an empty engine, the last a draining one), and the points give the knee, the
highest load that still meets the SLO while its throughput still grows. The same functions
read a simulator's records, so a live sweep and a simulated one are judged alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from burstguard.wire.outcomes import Outcome
from burstguard.wire.records import RequestRecord
from burstguard.wire.summary import Slo

SWEEP_SCHEMA = "burstguard.sweep/1"
AXES = {"rate": "req/s", "concurrency": "users"}
MAX_POINTS = 64
KEEP_UP = 0.9
"""Open loop: a rate is served while the server finishes at least this share of what it
was offered in the window (both counted over the same realised arrivals, so a Poisson
schedule's own noise cancels); past saturation the share falls as the queue grows."""
MIN_GAIN = 0.25
"""Closed loop: more users still raise throughput while it gains at least this share of
the users' gain (1: scales perfectly; an engine whose steps slow with the batch gains
less, 0.3-0.5 measured on smollm2-135m-cpu, and a saturated one ~0)."""


@dataclass(frozen=True)
class SweepSpec:
    """The swept axis (`rate`: open loop, req/s; `concurrency`: closed loop, users) and
    its loads, ascending."""

    axis: str
    values: tuple[float, ...]

    @classmethod
    def parse(cls, text: str) -> SweepSpec:
        """`rate=1,2,4`, `concurrency=1,2,4,8` or a range `rate=0.5:4:0.5` (START:STOP:STEP,
        STOP included); raises ValueError saying what is wrong."""
        axis, sep, rest = text.partition("=")
        axis = axis.strip()
        if not sep or axis not in AXES:
            raise ValueError(
                f"--sweep {text!r}: expected rate=A,B,... or concurrency=N,M,... "
                "(or AXIS=START:STOP:STEP)"
            )
        try:
            if ":" in rest:
                start, stop, step = (float(x) for x in rest.split(":"))
                if step <= 0 or stop < start:
                    raise ValueError("STEP must be > 0 and STOP >= START")
                n = math.floor((stop - start) / step + 1e-9) + 1
                values = [round(start + i * step, 9) for i in range(min(n, MAX_POINTS + 1))]
            else:
                values = [float(x) for x in rest.split(",") if x.strip()]
        except ValueError as exc:
            detail = "" if "could not convert" in str(exc) or "unpack" in str(exc) else f": {exc}"
            raise ValueError(f"--sweep {text!r}: not a list or range of numbers{detail}") from None
        if not values:
            raise ValueError(f"--sweep {text!r}: no loads given")
        if len(values) > MAX_POINTS:
            raise ValueError(f"--sweep {text!r}: at most {MAX_POINTS} points")
        if min(values) <= 0 or not all(math.isfinite(v) for v in values):
            raise ValueError(f"--sweep {text!r}: every load must be > 0")
        if axis == "concurrency" and any(v != int(v) for v in values):
            raise ValueError(f"--sweep {text!r}: concurrency is a whole number of users")
        if len(set(values)) != len(values):
            raise ValueError(f"--sweep {text!r}: a load appears twice")
        return cls(axis, tuple(sorted(values)))

    @property
    def unit(self) -> str:
        return AXES[self.axis]


@dataclass(frozen=True)
class Window:
    """The part of a point's schedule its figures cover: [warm-up, duration - cool-down)."""

    duration_s: float
    warmup_s: float
    cooldown_s: float

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.cooldown_s < 0:
            raise ValueError("--warmup and --cooldown must be >= 0")
        if self.length_s <= 0:
            raise ValueError(
                f"--warmup {self.warmup_s:g} + --cooldown {self.cooldown_s:g} leave nothing "
                f"of each point's --duration {self.duration_s:g} s to measure"
            )

    @property
    def end_s(self) -> float:
        return self.duration_s - self.cooldown_s

    @property
    def length_s(self) -> float:
        return self.end_s - self.warmup_s

    def holds(self, t: float) -> bool:
        return self.warmup_s <= t < self.end_s


@dataclass
class Point:
    """One load's figures over its window. Requests belong to the window by when they
    were scheduled; throughput counts completions that ended inside it, so past
    saturation it shows what the server finished, not what it was given."""

    load: float
    requests: int
    offered_rps: float
    achieved_rps: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    tpot_p50_s: float | None
    tpot_p95_s: float | None
    slo_attainment: float | None
    errors: int
    """Requests that failed (HTTP error, timeout, broken stream); not those cut at the end."""
    unfinished: int
    """Still running when the point's drain ran out: SLO misses, not errors."""
    schedule_lag_p99_s: float | None
    dir: str = ""

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None


def point_from_records(
    load: float, records: Sequence[RequestRecord], window: Window, slo: Slo, dir: str = ""
) -> Point:
    """The point's figures from its leg's records (bench or sim: the same format)."""
    inside = [r for r in records if window.holds(r.scheduled_s)]
    ok = [r for r in inside if r.ok]
    ended = [r for r in records if r.ok and r.sent_s is not None and r.e2e_s is not None
             and window.holds(r.sent_s + r.e2e_s)]  # fmt: skip
    span = window.length_s
    tpots = [t for r in ok if (t := r.tpot_s) is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    lags = [r.sent_s - r.scheduled_s for r in inside if r.sent_s is not None]
    cut = sum(1 for r in inside if r.error == Outcome.CANCELLED)
    return Point(
        load=load, requests=len(inside), offered_rps=len(inside) / span,
        achieved_rps=len(ended) / span,
        output_tokens_per_s=sum(r.completion_tokens or 0 for r in ended) / span,
        ttft_p50_s=_pct(ttfts, 50), ttft_p95_s=_pct(ttfts, 95),
        tpot_p50_s=_pct(tpots, 50), tpot_p95_s=_pct(tpots, 95),
        slo_attainment=sum(1 for r in inside if slo.met(r)) / len(inside) if inside else None,
        errors=len(inside) - len(ok) - cut, unfinished=cut,
        schedule_lag_p99_s=_pct(lags, 99), dir=dir,
    )  # fmt: skip


@dataclass(frozen=True)
class StopRule:
    """When a point ends the sweep: too few requests within the SLO, or too many errors."""

    min_slo_attainment: float = 0.9
    max_error_rate: float = 0.05

    def __post_init__(self) -> None:
        for name, v in (("--stop-below-slo", self.min_slo_attainment),
                        ("--stop-above-errors", self.max_error_rate)):  # fmt: skip
            if not 0 <= v <= 1:
                raise ValueError(f"{name} {v:g}: a share between 0 and 1")

    def miss(self, point: Point) -> str | None:
        """Why the point fails the rule, or None when it meets it."""
        if point.requests == 0:
            return "no request fell in its window"
        if point.error_rate > self.max_error_rate:
            return f"errors {point.error_rate:.1%} > {self.max_error_rate:.1%}"
        att = point.slo_attainment or 0.0
        if att < self.min_slo_attainment:
            return f"SLO attainment {att:.1%} < {self.min_slo_attainment:.1%}"
        return None


@dataclass
class Knee:
    """The highest load that meets the SLO and still grew throughput (None: even the
    lowest misses), with why the next load is past it."""

    index: int | None
    load: float | None
    limited_by: list[str] = field(default_factory=list)
    """`slo` (the next load misses the stop rule), `throughput` (a later load gained
    too little), both, or none when the sweep never reached the knee."""
    bounded: bool = True
    """False when every load met the SLO and grew: the knee lies above the sweep."""
    reason: str = ""


def _gain(base: Point, p: Point) -> tuple[float, float]:
    """(throughput gain, load gain) of `p` over `base`, as fractions."""
    got = p.achieved_rps / base.achieved_rps - 1 if base.achieved_rps > 0 else math.inf
    return got, p.load / base.load - 1


def keeps_up(p: Point, keep_up: float = KEEP_UP) -> bool:
    """Open loop: the server finished (nearly) what it was offered in the window."""
    return p.achieved_rps >= keep_up * p.offered_rps


def _throughput_knee(
    pts: Sequence[Point], axis: str, keep_up: float, min_gain: float
) -> tuple[int, str | None]:
    """(index of the last load whose throughput still grew, -1 for none; why the next
    did not)."""
    if axis == "rate":
        for i, p in enumerate(pts):
            if not keeps_up(p, keep_up):
                return i - 1, (
                    f"throughput stopped growing: {p.load:g} finished {p.achieved_rps:.2f} of "
                    f"{p.offered_rps:.2f} req/s offered ({p.achieved_rps / p.offered_rps:.0%} "
                    f"< {keep_up:.0%})"
                )
        return len(pts) - 1, None
    # closed loop: against the last load that grew, so one noisy dip does not end the
    # growth and a noisy bump past saturation does not restart it
    grew = 0
    for i in range(1, len(pts)):
        got, ideal = _gain(pts[grew], pts[i])
        if got >= min_gain * ideal:
            grew = i
    if grew + 1 == len(pts):
        return grew, None
    nxt = pts[grew + 1]
    got, ideal = _gain(pts[grew], nxt)
    return grew, (
        f"throughput stopped growing: {nxt.load:g} gave {nxt.achieved_rps:.2f} req/s vs "
        f"{pts[grew].achieved_rps:.2f} ({got:+.0%} for {ideal:+.0%} load)"
    )


def find_knee(
    points: Sequence[Point],
    rule: StopRule,
    axis: str = "rate",
    keep_up: float = KEEP_UP,
    min_gain: float = MIN_GAIN,
) -> Knee:
    """The knee of a sweep: the lower of (a) the last load before the first that misses
    `rule` and (b) the last load whose throughput still grew: open loop (`rate`), the
    server finished `keep_up` of what it was offered; closed loop (`concurrency`), it
    gained `min_gain` x the users' gain over the last load that grew."""
    pts = sorted(points, key=lambda p: p.load)
    if not pts:
        return Knee(None, None, [], False, "no points")
    slo_last, failed = None, None
    for i, p in enumerate(pts):
        if rule.miss(p) is not None:
            failed = i
            break
        slo_last = i
    if slo_last is None:
        why = rule.miss(pts[0])
        return Knee(None, None, ["slo"], True,
                    f"even the lowest load {pts[0].load:g} misses: {why}")  # fmt: skip
    grew, stalled = _throughput_knee(pts, axis, keep_up, min_gain)
    if grew < 0:
        return Knee(None, None, ["throughput"], True,
                    f"even the lowest load {pts[0].load:g} falls behind: {stalled}")  # fmt: skip
    knee = min(slo_last, grew)
    limited: list[str] = []
    reasons: list[str] = []
    if failed is not None and failed == knee + 1:
        limited.append("slo")
        reasons.append(f"the next load {pts[failed].load:g} misses: {rule.miss(pts[failed])}")
    if grew == knee and stalled is not None:
        limited.append("throughput")
        reasons.append(stalled)
    if not limited:
        reasons.append(
            f"every load up to {pts[-1].load:g} met the SLO and grew throughput: the knee "
            "lies above the sweep (raise its top)"
        )
    return Knee(knee, pts[knee].load, limited, bool(limited), "; ".join(reasons))


def sweep_doc(
    spec: SweepSpec,
    points: Sequence[Point],
    rule: StopRule,
    *,
    window: Window,
    slo: Slo,
    stopped: str | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `burstguard.sweep/1` document (sweep.json)."""
    knee = find_knee(points, rule, spec.axis)
    return {
        "schema": SWEEP_SCHEMA,
        "axis": spec.axis,
        "unit": spec.unit,
        "values": list(spec.values),
        "window": asdict(window),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "stop": asdict(rule),
        "knee_rule": {"keep_up": KEEP_UP, "min_gain": MIN_GAIN},
        "stopped": stopped,
        **(meta or {}),
        "points": [{**asdict(p), "error_rate": p.error_rate} for p in points],
        "knee": asdict(knee),
    }


def write_sweep(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def read_sweep(path: Path) -> dict[str, Any]:
    """sweep.json, or a directory holding one; ValueError naming the path when it is not."""
    path = path / "sweep.json" if path.is_dir() else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (a `bench --sweep` --out directory)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SWEEP_SCHEMA:
        raise ValueError(f"{path}: not a burstguard sweep (expected schema {SWEEP_SCHEMA})")
    return data


def knee_of(doc: dict[str, Any], source: Path) -> tuple[str, float]:
    """(axis, knee load) of a sweep document; ValueError when it found no knee."""
    knee = doc.get("knee") or {}
    if knee.get("load") is None:
        raise ValueError(f"{source}: the sweep found no knee ({knee.get('reason', '?')})")
    return str(doc["axis"]), float(knee["load"])


def plan_sweep(
    text: str,
    *,
    duration_s: float,
    rate_given: bool,
    pattern: str | None,
    warmup_s: float | None,
    cooldown_s: float | None,
    ramp_up_s: float,
    rule: tuple[float, float],
    conflicts: dict[str, bool],
) -> tuple[SweepSpec, Window, StopRule, str]:
    """`bench --sweep`'s flags checked together: (spec, window, stop rule, the open loop's
    pattern). `conflicts`: flags that pick a load of their own, by name, and whether given.
    Raises ValueError saying which flag is wrong."""
    spec = SweepSpec.parse(text)
    given = [name for name, on in conflicts.items() if on]
    if given:
        raise ValueError(f"--sweep picks each point's load: not with {', '.join(given)}")
    if rate_given:
        raise ValueError("--sweep sets each point's rate: drop --rate")
    if spec.axis == "concurrency" and pattern is not None:
        raise ValueError("--sweep concurrency=... is a closed loop: drop --pattern")
    default = duration_s / 10
    warm = max(default, ramp_up_s) if warmup_s is None and spec.axis == "concurrency" else warmup_s
    window = Window(duration_s, default if warm is None else warm,
                    default if cooldown_s is None else cooldown_s)  # fmt: skip
    return spec, window, StopRule(*rule), pattern or "poisson"
