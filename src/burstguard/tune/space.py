"""The search space: named knobs, the values to try for each, and their grid.

A candidate is a tuple of (knob, value) pairs, hashable and picklable, so the search
can hand it to worker processes and remember what it has tried.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burstguard.errors import ConfigError

Candidate = tuple[tuple[str, Any], ...]


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("on", "true", "yes", "1"):
        return True
    if low in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"{text!r} is not on/off")


@dataclass(frozen=True, slots=True)
class Knob:
    """One tunable setting: its CLI name, the field it sets, and how to read a value."""

    name: str
    field: str
    parse: Callable[[str], Any]
    default_values: tuple[Any, ...]
    help: str


ENGINE_KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("max-num-seqs", "max_num_seqs", int, (64, 128, 256, 512), "vLLM --max-num-seqs"),
        Knob("max-num-batched-tokens", "max_num_batched_tokens", int, (2048, 8192, 16384),
             "vLLM --max-num-batched-tokens"),
        Knob("gpu-memory-utilization", "gpu_memory_utilization", float, (0.8, 0.9, 0.95),
             "vLLM --gpu-memory-utilization"),
        Knob("chunked-prefill", "enable_chunked_prefill", _bool, (True, False),
             "vLLM --enable-chunked-prefill (on/off)"),
    )
}  # fmt: skip


SCALING_PATHS: dict[str, dict[str, tuple[str, ...]]] = {
    "threshold": {"keda": ("keda", "target"), "kpa": ("kpa", "target_concurrency"),
                  "predictive": ("predictive", "rate_per_replica")},
    "window": {"keda": ("keda", "query", "window_s"), "kpa": ("kpa", "stable_window_s"),
               "predictive": ("predictive", "burst_window_s")},
    "min-replicas": {k: (k, "min_replicas") for k in ("keda", "kpa", "predictive")},
    "cooldown": {"keda": ("keda", "behavior", "scale_down", "stabilization_window_s"),
                 "kpa": ("kpa", "scale_down_delay_s"),
                 "predictive": ("predictive", "scale_down_window_s")},
}  # fmt: skip
"""Where each autoscaler knob lives in a policy of each kind: the trigger's threshold
(waiting requests, req/s or concurrency per replica), its window (the query's range, KPA's
stable window, the burst window), the minimum, and the scale-down wait."""


def scaling_knobs(base: Mapping[str, Any]) -> dict[str, Knob]:
    """The autoscaler knobs for the policy `base` (a `model_dump`), with default values
    around its own: threshold x0.5-2, window x0.5-2, min 1/2/4, cooldown 0-5 min."""

    def at(path: tuple[str, ...]) -> float:
        value: Any = base
        for key in path:
            value = value[key]
        return float(value)

    kind = base["kind"]
    threshold = at(SCALING_PATHS["threshold"][kind])
    window = at(SCALING_PATHS["window"][kind])
    return {
        "policy": Knob("policy", "policy", str, (), "a preset or policy file (the metric)"),
        "threshold": Knob("threshold", "threshold", float,
                          tuple(round(threshold * f, 6) for f in (0.5, 0.75, 1.0, 1.5, 2.0)),
                          "target per replica (queue, req/s or concurrency)"),
        "window": Knob("window", "window", float,
                       tuple(round(window * f, 6) for f in (0.5, 1.0, 2.0)), "seconds"),
        "min-replicas": Knob("min-replicas", "min-replicas", int, (1, 2, 4), "minimum"),
        "cooldown": Knob("cooldown", "cooldown", float, (0.0, 60.0, 120.0, 300.0),
                         "scale-down wait, seconds"),
    }  # fmt: skip


def parse_axes(
    items: Sequence[str], knobs: Mapping[str, Knob], optional: Collection[str] = ()
) -> dict[str, tuple[Any, ...]]:
    """`["max-num-seqs=64,128", ...]` -> {knob: values}; knobs not named keep their
    default values, except the `optional` ones, searched only when named. An empty list
    gives the default grid."""
    axes = {
        name: k.default_values
        for name, k in knobs.items()
        if k.default_values and name not in optional
    }
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or name not in knobs:
            raise ConfigError(
                f"--axis {item!r}: expected KNOB=V1,V2,... with KNOB one of {', '.join(knobs)}"
            )
        try:
            parsed = tuple(knobs[name].parse(v) for v in values.split(",") if v.strip())
        except ValueError as exc:
            raise ConfigError(f"--axis {item!r}: {exc}") from None
        if not parsed:
            raise ConfigError(f"--axis {item!r}: no values")
        axes[name] = tuple(dict.fromkeys(parsed))
    return axes


def split(candidate: Candidate) -> tuple[Candidate, Candidate]:
    """(engine knobs, the others): a joint candidate's two halves."""
    engine = tuple((k, v) for k, v in candidate if k in ENGINE_KNOBS)
    return engine, tuple((k, v) for k, v in candidate if k not in ENGINE_KNOBS)


def grid(axes: Mapping[str, Sequence[Any]]) -> list[Candidate]:
    """Every combination, in a fixed order."""
    names = list(axes)
    return [tuple(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]


def describe(candidate: Candidate) -> str:
    """`max-num-seqs=128 chunked-prefill=off`: how a candidate is printed."""
    return " ".join(f"{k}={_show(v)}" for k, v in candidate)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
