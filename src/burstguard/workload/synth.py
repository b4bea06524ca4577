"""Synthetic workloads: an arrival pattern plus request shapes and labels, from one spec."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from burstguard.errors import ConfigError
from burstguard.wire.prefix import BLOCK_TOKENS, h64
from burstguard.workload import arrivals
from burstguard.workload.seed import BURST_SIZE, IDLE_S
from burstguard.workload.sessions import SessionShape, synthesize_sessions
from burstguard.workload.shapes import parse_mix, sample_labels, sample_lengths
from burstguard.workload.spec import Workload

PATTERNS = ("constant", "poisson", "gamma", "burst", "mmpp", "pareto")


@dataclass(frozen=True)
class PatternSpec:
    """Everything `generate` (and bench/sim `--pattern`) can ask for.

    pattern: one of PATTERNS. rate: mean req/s (burst: rescales the idle range to match;
    mmpp: rescales both state rates). burst_size / idle_s: the seed pattern's ranges.
    mmpp_*: state rates (req/s) and mean sojourn times (s). hurst / sources: pareto.
    envelope: ramp | step | diurnal, with envelope_params. Lengths and mixes: see shapes.
    class_output_tokens: (class, length spec) pairs that replace output_tokens for that
    class, so a mix can give batch long outputs and interactive short ones.
    """

    pattern: str = "poisson"
    duration_s: float = 60.0
    rate: float | None = None
    seed: int = 0
    burstiness: float = 1.0
    burst_size: tuple[int, int] = BURST_SIZE
    idle_s: tuple[float, float] = IDLE_S
    burst_spread_s: float = 0.0
    mmpp_rate_on: float = 20.0
    mmpp_rate_off: float = 1.0
    mmpp_mean_on_s: float = 2.0
    mmpp_mean_off_s: float = 10.0
    hurst: float = 0.8
    sources: int = 32
    envelope: str | None = None
    envelope_params: dict[str, float] = field(default_factory=dict)
    prompt_tokens: str = "512"
    output_tokens: str = "128"
    classes: str | None = None
    tenants: str | None = None
    class_output_tokens: tuple[tuple[str, str], ...] = ()
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    sessions: SessionShape | None = None
    """Each arrival starts a conversation or an agent run (`workload.sessions`)."""


def mean_rate(spec: PatternSpec) -> float:
    """The pattern's documented mean rate (before any envelope)."""
    if spec.pattern == "burst":
        scale = (
            1.0
            if spec.rate is None
            else arrivals.burst_idle_scale(spec.rate, spec.burst_size, spec.idle_s)
        )
        mean_size = sum(spec.burst_size) / 2
        return mean_size / (sum(spec.idle_s) / 2 * scale)
    if spec.pattern == "mmpp" and spec.rate is None:
        on, off = spec.mmpp_mean_on_s, spec.mmpp_mean_off_s
        return (spec.mmpp_rate_on * on + spec.mmpp_rate_off * off) / (on + off)
    return spec.rate if spec.rate is not None else 1.0


def _arrivals(spec: PatternSpec, rng: np.random.Generator, multiplier: float) -> np.ndarray:
    rate = mean_rate(spec) * multiplier
    d = spec.duration_s
    if spec.pattern == "constant":
        return arrivals.constant(rate, d)
    if spec.pattern == "poisson":
        return arrivals.poisson(rate, d, rng)
    if spec.pattern == "gamma":
        return arrivals.gamma(rate, spec.burstiness, d, rng)
    if spec.pattern == "burst":
        scale = arrivals.burst_idle_scale(rate, spec.burst_size, spec.idle_s)
        idle = (spec.idle_s[0] * scale, spec.idle_s[1] * scale)
        return arrivals.burst(d, rng, spec.burst_size, idle, spec.burst_spread_s)[0]
    if spec.pattern == "mmpp":
        base = mean_rate(PatternSpec(**{**spec.__dict__, "rate": None}))
        k = rate / base
        return arrivals.mmpp(
            d,
            rng,
            spec.mmpp_rate_on * k,
            spec.mmpp_rate_off * k,
            spec.mmpp_mean_on_s,
            spec.mmpp_mean_off_s,
        )
    if spec.pattern == "pareto":
        return arrivals.pareto_on_off(rate, d, rng, spec.hurst, spec.sources)
    raise ConfigError(f"unknown pattern {spec.pattern!r}: use one of {', '.join(PATTERNS)}")


MAX_REQUESTS = 50_000_000  # ~2 GB of arrays: far more than any run here needs


def _check_numbers(spec: PatternSpec) -> None:
    """The spec's numbers are finite and positive (the command line takes nan and inf as
    floats, and `x <= 0` lets nan through), and the mean request count fits in memory."""
    named = {"--duration": spec.duration_s, "--rate": spec.rate, "--burstiness": spec.burstiness,
             "--hurst": spec.hurst, "--mmpp": min(spec.mmpp_rate_on, spec.mmpp_mean_on_s,
                                                   spec.mmpp_mean_off_s)}  # fmt: skip
    for name, value in named.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{name} must be a finite number > 0 (got {value:g})")
    if not (math.isfinite(spec.mmpp_rate_off) and spec.mmpp_rate_off >= 0):
        raise ConfigError(
            f"--mmpp: RATE_OFF must be a finite number >= 0 (got {spec.mmpp_rate_off:g})"
        )
    if spec.shared_prefix_tokens < 0 or spec.prefix_groups < 1:
        raise ConfigError("--shared-prefix must be >= 0 tokens and --prefix-groups >= 1")
    expected = mean_rate(spec) * spec.duration_s
    if not expected <= MAX_REQUESTS:
        raise ConfigError(
            f"--rate x --duration asks for ~{expected:.3g} requests; at most {MAX_REQUESTS:,}"
        )


def synthesize(spec: PatternSpec) -> Workload:
    """Builds a seeded synthetic workload from the spec."""
    _check_numbers(spec)
    rng = np.random.default_rng(spec.seed)
    try:
        if spec.envelope:
            times = arrivals.apply_envelope(
                lambda m: _arrivals(spec, rng, m),
                spec.envelope,
                spec.duration_s,
                spec.envelope_params,
                rng,
            )
        else:
            times = _arrivals(spec, rng, 1.0)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if spec.sessions is not None:

        def outputs_for(out: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
            return _class_outputs(spec, out, labels, rng) if spec.class_output_tokens else out

        return synthesize_sessions(spec, times, rng, outputs_for)
    n = times.size
    prompt = sample_lengths(spec.prompt_tokens, n, rng)
    output = sample_lengths(spec.output_tokens, n, rng)
    labels = sample_labels(spec.classes, n, rng) if spec.classes else None
    tenant = sample_labels(spec.tenants, n, rng) if spec.tenants else None
    if spec.class_output_tokens:
        output = _class_outputs(spec, output, labels, rng)
    meta: dict[str, object] = {
        "pattern": spec.pattern, "mean_rate_rps": mean_rate(spec), "seed": spec.seed,
    }  # fmt: skip
    prefixes = None
    if spec.shared_prefix_tokens:
        prompt, prefixes = _shared_prefixes(spec, prompt, rng)
        meta.update(shared_prefix_tokens=spec.shared_prefix_tokens,
                    prefix_groups=spec.prefix_groups, block_tokens=BLOCK_TOKENS)  # fmt: skip
    return Workload(
        arrival_s=times,
        prompt_tokens=prompt,
        output_tokens=output,
        priority_class=labels,
        tenant=tenant,
        prefix_hashes=prefixes,
        source=f"synthetic:{spec.pattern}",
        meta=meta,
    )


def _shared_prefixes(
    spec: PatternSpec, prompt: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Each request joins one of `prefix_groups` groups (uniformly) and starts with its
    group's `shared_prefix_tokens`-token prefix (as a system prompt per product): the
    prompt grows by it, and its 16-token blocks are named per (seed, group, block), so the
    members of a group share exactly those blocks. Drawn last: other draws are unchanged."""
    blocks = spec.shared_prefix_tokens // BLOCK_TOKENS
    groups = [
        tuple(h64(f"shared-prefix/{spec.seed}/{g}/{b}".encode()) for b in range(blocks))
        for g in range(spec.prefix_groups)
    ]
    member = rng.integers(0, spec.prefix_groups, prompt.size)
    return prompt + spec.shared_prefix_tokens, [groups[g] for g in member.tolist()]


def _class_outputs(
    spec: PatternSpec, output: np.ndarray, labels: np.ndarray | None, rng: np.random.Generator
) -> np.ndarray:
    """Redraws the output lengths of each overridden class from its own spec.

    Drawn after everything else, so a workload without overrides is unchanged by this.
    """
    if labels is None:
        raise ConfigError("--class-output-tokens needs --classes (a class mix to apply it to)")
    known = set(labels.tolist()) | set(parse_mix(spec.classes or ""))
    output = output.copy()
    for name, length_spec in spec.class_output_tokens:
        if name not in known:
            raise ConfigError(
                f"--class-output-tokens: class {name!r} is not in --classes {spec.classes!r}"
            )
        mask = labels == name
        output[mask] = sample_lengths(length_spec, int(mask.sum()), rng)
    return output


def shape_pool(spec: PatternSpec) -> Workload:
    """Request shapes (lengths, classes, tenants) for closed-loop loads, which take them in
    turn: the spec's mixes drawn for a pool sized to the run (1,000 to 100,000)."""
    size = max(1000, min(100_000, int(spec.duration_s * 200)))
    return synthesize(replace(spec, pattern="constant", rate=size / spec.duration_s, envelope=None,
                              sessions=None))  # fmt: skip
