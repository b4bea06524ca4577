"""`engine_options`: the vLLM-named engine flags, written once for `emulate` and `sim`.

The decorator rewrites the command's `__signature__` so typer sees the flags, and calls
the command with `profile: Profile` and `engine_config: EngineConfig` instead. vLLM's
on/off pairs (`--enable-chunked-prefill` / `--no-enable-chunked-prefill`) are two rows of
the help, not one: side by side they leave --help no room at 80 columns, and the names
are what a user came for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from burstguard.core.engine.config import SCHEDULING_POLICIES, EngineConfig
from burstguard.core.engine.machine import this_cpu
from burstguard.core.engine.profile import Profile, list_profiles, machine_profile_path
from burstguard.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

_PANEL = "Engine (vLLM flags)"
NEGATED = "no_"
SWITCHES = ("enable_chunked_prefill", "enable_prefix_caching")


def _switches(values: dict[str, Any]) -> None:
    """Folds each `--X` / `--no-X` pair into one value (left out: the config's default)."""
    for name in SWITCHES:
        on, off = values.pop(name), values.pop(NEGATED + name)
        if on and off:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} and --no-{flag[2:]} contradict each other")
        if on or off:
            values[name] = bool(on)


def _option_params() -> list[inspect.Parameter]:
    defaults = EngineConfig()

    def opt(name: str, annotation: Any, default: Any, *decls: str, help: str) -> inspect.Parameter:
        return inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=annotation,
            default=typer.Option(default, *decls, help=help, rich_help_panel=_PANEL),
        )

    def switch(name: str, default: bool, *, help: str) -> list[inspect.Parameter]:
        flag = "--" + name.replace("_", "-")
        state = "on" if default else "off"
        return [
            opt(name, bool | None, None, flag, help=f"{help} (default: {state})"),
            opt(NEGATED + name, bool | None, None, "--no-" + flag[2:], help=f"{flag} off"),
        ]

    return [
        opt(
            "engine_profile",
            str,
            "llama3-8b-h100",
            "--profile",
            help=f"hardware+model profile: {', '.join(list_profiles())}, or a YAML path",
        ),
        opt(
            "max_num_seqs",
            int,
            defaults.max_num_seqs,
            "--max-num-seqs",
            help="most requests running at once",
        ),
        opt(
            "max_num_batched_tokens",
            int,
            defaults.max_num_batched_tokens,
            "--max-num-batched-tokens",
            help="token budget of one step",
        ),
        opt(
            "max_model_len",
            int | None,
            None,
            "--max-model-len",
            help="longest prompt + output (default: the profile's model)",
        ),
        opt(
            "gpu_memory_utilization",
            float,
            defaults.gpu_memory_utilization,
            "--gpu-memory-utilization",
            help="share of GPU memory for weights + KV cache",
        ),
        *switch(
            "enable_chunked_prefill",
            defaults.enable_chunked_prefill,
            help="split long prefills across steps, decodes first",
        ),
        opt(
            "scheduling_policy",
            str,
            defaults.scheduling_policy,
            "--scheduling-policy",
            help=f"{' | '.join(SCHEDULING_POLICIES)} (priority: lower value first)",
        ),
        *switch(
            "enable_prefix_caching",
            defaults.enable_prefix_caching,
            help="reuse cached KV blocks of shared prompt prefixes",
        ),
        opt(
            "block_size",
            int,
            defaults.block_size,
            "--block-size",
            help="tokens per KV block, the prefix cache's unit (vLLM's CPU backend: 128)",
        ),
        opt(
            "num_gpu_blocks_override",
            int | None,
            None,
            "--num-gpu-blocks-override",
            help="KV cache blocks (--block-size tokens each), whatever the profile's memory allows",
        ),
    ]


def _say_where_fitted(profile: Profile) -> None:
    """On stderr: a CPU fit used on another CPU, or that this machine's own fit is used."""
    import sys

    warning = profile.cpu_warning(this_cpu())
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    elif profile.path == machine_profile_path(profile.name).resolve():
        print(f"profile {profile.name}: this machine's calibration ({profile.path})",
              file=sys.stderr, flush=True)  # fmt: skip


def engine_options(func: F) -> F:
    """Adds the engine flags to a typer command that takes `profile` and `engine_config`."""
    sig = inspect.signature(func, eval_str=True)
    for needed in ("profile", "engine_config"):
        if needed not in sig.parameters:
            raise TypeError(f"{func.__name__} must accept a `{needed}` parameter")
    kept = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in sig.parameters.values()
        if p.name not in ("profile", "engine_config")
    ]
    added = _option_params()
    names = [p.name for p in added]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        _switches(values)
        profile = Profile.load(values.pop("engine_profile"))
        _say_where_fitted(profile)
        config = EngineConfig(**values)
        return func(*args, profile=profile, engine_config=config, **kwargs)

    params = kept + added
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    if sig.return_annotation is not inspect.Signature.empty:
        wrapper.__annotations__["return"] = sig.return_annotation
    return wrapper  # type: ignore[return-value]
