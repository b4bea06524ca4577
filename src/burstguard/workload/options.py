"""`pattern_options`: the synthetic-workload flags, written once for generate, sim and bench.

The decorator rewrites the command's `__signature__` so typer sees the flags, and calls the
command with `pattern_spec: PatternSpec | None` (None when `--pattern` was not given, for
commands where the pattern is optional). A command that also takes `shape_spec` gets the
request shapes and mixes even without `--pattern` (bench's closed loop needs lengths only).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from burstguard.errors import ConfigError
from burstguard.workload import seed
from burstguard.workload.sessions import SessionShape
from burstguard.workload.shapes import parse_key_values
from burstguard.workload.synth import PATTERNS, PatternSpec

F = TypeVar("F", bound=Callable[..., Any])
_PANEL = "Workload pattern"


def _range(text: str, kind: type, name: str) -> tuple[Any, Any]:
    low, sep, high = text.partition("-")
    try:
        lo, hi = kind(low), kind(high if sep else low)
    except ValueError:
        raise ConfigError(f"{name} {text!r}: expected A-B (e.g. 15-30)") from None
    if lo <= 0 or hi < lo:
        raise ConfigError(f"{name} {text!r}: expected 0 < A <= B")
    return lo, hi


def _envelope(text: str | None) -> tuple[str | None, dict[str, float]]:
    if not text:
        return None, {}
    kind, _, rest = text.partition(":")
    return kind, parse_key_values(rest, f"--envelope {text!r}")


def _params(positional: bool) -> list[inspect.Parameter]:
    def opt(name: str, annotation: Any, default: Any, decl: str, help: str) -> inspect.Parameter:
        return inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=annotation,
            default=typer.Option(default, decl, help=help, rich_help_panel=_PANEL),
        )

    pattern_help = f"arrival pattern: {', '.join(PATTERNS)}"
    pattern = inspect.Parameter(
        "wl_pattern",
        inspect.Parameter.POSITIONAL_OR_KEYWORD if positional else inspect.Parameter.KEYWORD_ONLY,
        annotation=str if positional else str | None,
        default=typer.Argument(..., help=pattern_help, metavar="PATTERN")
        if positional
        else typer.Option(None, "--pattern", help=pattern_help, rich_help_panel=_PANEL),
    )
    return [
        pattern,
        opt("wl_duration", float, 60.0, "--duration", "seconds of traffic"),
        opt("wl_rate", float | None, None, "--rate", "mean request rate (req/s)"),
        opt("wl_seed", int, 0, "--seed", "random seed"),
        opt("wl_burstiness", float, 1.0, "--burstiness", "gamma: shape k (CV = 1/sqrt(k))"),
        opt(
            "wl_burst_size",
            str,
            seed.range_text(seed.BURST_SIZE),
            "--burst-size",
            "burst: requests per burst, A-B",
        ),
        opt(
            "wl_idle",
            str,
            seed.range_text(seed.IDLE_S),
            "--idle",
            "burst: idle gap s, A-B (scaled to --rate)",
        ),
        opt("wl_hurst", float, 0.8, "--hurst", "pareto: target Hurst exponent (0.5-1)"),
        opt(
            "wl_mmpp",
            str,
            "20,1,2,10",
            "--mmpp",
            "mmpp: ON_RATE,OFF_RATE (req/s), MEAN_ON_S, MEAN_OFF_S (comma-separated)",
        ),
        opt("wl_envelope", str | None, None, "--envelope", "ramp|step|diurnal[:key=v,...]"),
        opt(
            "wl_prompt_tokens",
            str,
            "512",
            "--prompt-tokens",
            "length spec: N, uniform:A-B, lognormal:mean=M,sigma=S, zipf:a=A,max=M, "
            "empirical:TRACE",
        ),
        opt("wl_output_tokens", str, "128", "--output-tokens", "length spec, as --prompt-tokens"),
        opt("wl_classes", str | None, None, "--classes", "class mix: interactive=0.7,batch=0.3"),
        opt("wl_tenants", str | None, None, "--tenants", "tenant mix: a=0.5,b=0.5"),
        opt(
            "wl_class_output_tokens",
            list[str] | None,
            None,
            "--class-output-tokens",
            "CLASS=SPEC: that class's output lengths (repeatable), e.g. batch=uniform:512-1024",
        ),
        opt(
            "wl_shared_prefix",
            int,
            0,
            "--shared-prefix",
            "TOKENS of prefix each request shares with its group (added to its prompt)",
        ),
        opt("wl_prefix_groups", int, 1, "--prefix-groups", "with --shared-prefix: N groups"),
        opt(
            "wl_sessions",
            int | None,
            None,
            "--sessions",
            "conversations: each arrival starts one (at most N); see --turns, --think",
        ),
        opt("wl_turns", str | None, None, "--turns", "turns per conversation, A-B (default 3)"),
        opt(
            "wl_think",
            str,
            "0",
            "--think",
            "seconds between an answer and the next turn or agent step, S or A-B",
        ),
        opt(
            "wl_fan_out",
            int | None,
            None,
            "--fan-out",
            "agent runs: each arrival starts one whose steps fire K parallel calls",
        ),
        opt("wl_steps", str, "2", "--steps", "with --fan-out: steps per agent run, A-B"),
    ]


def spec_from_values(values: dict[str, Any]) -> PatternSpec | None:
    """Builds the PatternSpec from the parsed flag values (keys without the wl_ prefix)."""
    if values["pattern"] is None:
        return None
    try:
        on, off, t_on, t_off = (float(x) for x in values["mmpp"].split(","))
    except ValueError:
        raise ConfigError(
            f"--mmpp {values['mmpp']!r}: expected RATE_ON,RATE_OFF,MEAN_ON_S,MEAN_OFF_S"
        ) from None
    env_kind, env_params = _envelope(values["envelope"])
    return PatternSpec(
        pattern=values["pattern"], duration_s=values["duration"], rate=values["rate"],
        seed=values["seed"], burstiness=values["burstiness"],
        burst_size=_range(values["burst_size"], int, "--burst-size"),
        idle_s=_range(values["idle"], float, "--idle"),
        mmpp_rate_on=on, mmpp_rate_off=off, mmpp_mean_on_s=t_on, mmpp_mean_off_s=t_off,
        hurst=values["hurst"], envelope=env_kind, envelope_params=env_params,
        prompt_tokens=values["prompt_tokens"], output_tokens=values["output_tokens"],
        classes=values["classes"], tenants=values["tenants"],
        class_output_tokens=_class_specs(values["class_output_tokens"]),
        shared_prefix_tokens=values["shared_prefix"], prefix_groups=values["prefix_groups"],
        sessions=_sessions(values),
    )  # fmt: skip


def _sessions(values: dict[str, Any]) -> SessionShape | None:
    """`--sessions/--turns/--think` or `--fan-out/--steps`; None when none is given."""
    conversation = values["sessions"] is not None or values["turns"] is not None
    agent = values["fan_out"] is not None
    if not (conversation or agent):
        return None
    if agent and values["turns"] is not None:
        raise ConfigError("--turns is for conversations, --fan-out/--steps for agent runs")
    if agent and values["fan_out"] < 1:
        raise ConfigError(f"--fan-out must be >= 1 (got {values['fan_out']})")
    low, sep, high = values["think"].partition("-")
    try:
        think = (float(low), float(high if sep else low))
    except ValueError:
        raise ConfigError(f"--think {values['think']!r}: expected S or A-B seconds") from None
    shape = SessionShape(
        sessions=values["sessions"],
        turns=_range(values["turns"] or "3", int, "--turns"),
        think_s=think,
        fan_out=values["fan_out"] or 0,
        steps=_range(values["steps"], int, "--steps"),
    )
    shape.check()
    return shape


def _class_specs(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """`batch=uniform:512-1024` -> (("batch", "uniform:512-1024"),); the spec is checked
    when lengths are drawn, the CLASS against --classes."""
    pairs = []
    for item in items or ():
        name, sep, spec = item.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise ConfigError(f"--class-output-tokens {item!r}: expected CLASS=LENGTH_SPEC")
        pairs.append((name.strip(), spec.strip()))
    return tuple(pairs)


def pattern_options(positional: bool = False) -> Callable[[F], F]:
    """Adds the pattern flags to a typer command taking `pattern_spec`.

    positional=True makes PATTERN the first argument (generate); otherwise it is
    `--pattern NAME` and optional (bench, sim).
    """

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        if "pattern_spec" not in sig.parameters:
            raise TypeError(f"{func.__name__} must accept a `pattern_spec` parameter")
        wants_shape = "shape_spec" in sig.parameters
        injected = ("pattern_spec", "shape_spec")
        kept = [p for p in sig.parameters.values() if p.name not in injected]
        added = _params(positional)
        names = [p.name for p in added]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name[3:]: kwargs.pop(name) for name in names}
            if wants_shape:
                kwargs["shape_spec"] = spec_from_values(
                    {**values, "pattern": values["pattern"] or "constant"}
                )
            return func(*args, pattern_spec=spec_from_values(values), **kwargs)

        head = [p for p in added if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        tail = [p for p in added if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD]
        params = head + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in kept] + tail
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


# the trace options `sim` and `tune` share (a replayed workload file and its format)
TraceFileOption = Annotated[
    Path | None, typer.Option("--trace", help="Trace file (any analyze format).")
]
TraceFormatOption = Annotated[str | None, typer.Option("--format", help="Trace format override.")]
