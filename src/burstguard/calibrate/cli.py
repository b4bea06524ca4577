"""`burstguard calibrate --target URL --out PROFILE.yaml`: fit a `fitted` emulator profile.

(`--kernels TABLE --shape MODEL --gpu GPU` instead fits a GPU profile to measured kernel
times: calibrate/from_kernels.py.)

It times lone prefills of several prompt lengths, bursts of short prompts sent together
and decode steps at several batch sizes on the live engine, fits the linear step-time
model (calibrate/fit.py) and reads the KV cache capacity from vLLM's
`vllm:cache_config_info` (or takes `--kv-cache-tokens`). The result
loads with `burstguard emulate --profile PROFILE.yaml` and `burstguard sim --profile ...`.
Run it on an otherwise idle engine: concurrent traffic would be timed as step time.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from burstguard.bench.stream import new_client
from burstguard.calibrate.check import CheckBounds, Evidence, between, failures, record
from burstguard.calibrate.fit import StepSample, fit_step_model
from burstguard.calibrate.from_kernels import calibrate_from_kernels
from burstguard.calibrate.probe import (
    Target,
    burst_samples,
    chat_template_tokens,
    decode_samples,
    prefill_samples,
)
from burstguard.calibrate.quiet import measure_busy, wait_until_quiet
from burstguard.core.engine.machine import this_cpu
from burstguard.errors import UserError, check_writable
from burstguard.http.preflight import target_card

_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"cannot reach {url}: {exc}") from exc


BURST_PROMPT_TOKENS = 64


def kv_capacity_from_metrics(text: str) -> tuple[int, int] | None:
    """(num_gpu_blocks, block_size) from vLLM's cache_config_info labels, if exported."""
    m = _CACHE_INFO.search(text)
    if not m:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    return (int(blocks), int(size)) if blocks.isdigit() and size.isdigit() else None


def _on_this_host(base: str) -> bool:
    host = urllib.parse.urlsplit(base).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def engine_device(base: str, device: str) -> str:
    """`device` as given, or for `auto`: cpu when the engine is on this host and the host
    has no GPU device node, gpu when it has one, unknown for a remote engine."""
    if device != "auto":
        return device
    if not _on_this_host(base):
        return "unknown"
    dev = Path("/dev")
    has_gpu = any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists() or (dev / "dxg").exists()
    return "gpu" if has_gpu else "cpu"


def engine_version(base: str) -> str | None:
    """`vLLM X.Y.Z` from vLLM's GET /version; None from an engine without it."""
    try:
        with urllib.request.urlopen(base + "/version", timeout=5) as resp:
            version = json.loads(resp.read(4096)).get("version")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return f"vLLM {version}" if isinstance(version, str) else None


def machine_section(base: str, device: str) -> dict[str, Any]:
    """The profile's `fitted.machine`: the CPU is recorded when the engine ran on it."""
    where: dict[str, Any] = {"device": engine_device(base, device)}
    if where["device"] == "cpu":
        cpu = this_cpu()
        where |= {"cpu": cpu.name, "cores": cpu.cores, "isa": list(cpu.isa),
                  "cpu_fingerprint": cpu.fingerprint}  # fmt: skip
    if version := engine_version(base):
        where["engine"] = version
    where["fitted_at"] = datetime.date.today().isoformat()
    return where


def _check_figures(check: dict[str, Any]) -> str:
    held = (
        f"held-back steps median error {check['held_back_median_rel_error']:.1%}, worst "
        f"{check['held_back_max_rel_error']:.1%}; "
        if check["held_back"]
        else ""
    )
    return f"{held}sentinel drift {check['sentinel_spread']:.1%}"


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what}: comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{what}: positive integers, got {text!r}")
    return values


SENTINEL_REPEATS = 3


async def _measure(
    t: Target, lengths: list[int], batches: list[int], bursts: list[int], repeats: int,
    local: bool,
) -> tuple[list[StepSample], int, Evidence]:  # fmt: skip
    """The step samples to fit, the chat template's extra prompt tokens, and the evidence
    the fit is checked against (calibrate/check.py): a sentinel prefill timed before and
    after each phase, and held-back steps between the probed points."""
    client = new_client(t.base_url, t.timeout_s)
    ev = Evidence()
    sentinel_len = sorted(lengths)[len(lengths) // 2]

    async def sentinel() -> None:
        s = await prefill_samples(client, t, [sentinel_len], SENTINEL_REPEATS, lambda _: None)
        ev.sentinel_s.append(s[0].seconds)

    try:
        await prefill_samples(client, t, [lengths[0]], 2, lambda _: None)  # warm up
        chat_extra = await chat_template_tokens(client, t)
        print(f"chat template: {chat_extra} prompt tokens beyond burstguard's count")
        await sentinel()
        samples = await prefill_samples(client, t, lengths, repeats, print)
        await sentinel()
        samples += await burst_samples(client, t, bursts, BURST_PROMPT_TOKENS, print)
        await sentinel()
        long_prompt = min(512, max(lengths))
        samples += await decode_samples(client, t, batches, [16, long_prompt], print)
        await sentinel()
        print("held back (not fitted; the fit must predict them):")
        ev.held_back += await prefill_samples(client, t, between(lengths, lengths), repeats, print)
        ev.held_back += await burst_samples(
            client, t, between([min(bursts), max(bursts)], bursts), BURST_PROMPT_TOKENS, print
        )
        mid_prompt = round((16 * long_prompt) ** 0.5)
        ev.held_back += await decode_samples(
            client, t, between(batches, batches), [mid_prompt], print
        )
        await sentinel()
    finally:
        client.close()
    if local:
        ev.busy_after = measure_busy()
    return samples, chat_extra, ev


def calibrate(
    out: Annotated[Path, typer.Option(help="profile YAML to write")],
    target: Annotated[
        str | None, typer.Option(help="base URL of the engine, e.g. http://127.0.0.1:8000")
    ] = None,
    name: Annotated[str, typer.Option(help="profile name")] = "calibrated",
    model: Annotated[str | None, typer.Option(help="model name (default: /v1/models)")] = None,
    prompt_lengths: Annotated[str, typer.Option(help="prefill probes, tokens")] = (
        "32,128,256,512,1024"
    ),
    batch_sizes: Annotated[str, typer.Option(help="decode probes, running requests")] = (
        "1,2,4,8,16,24,32"
    ),
    burst_sizes: Annotated[
        str, typer.Option(help=f"burst prefill probes, {BURST_PROMPT_TOKENS}-token prompts at once")
    ] = "4,12,24",
    repeats: Annotated[int, typer.Option(min=1, help="timings per prefill length")] = 3,
    kv_cache_tokens: Annotated[
        int | None, typer.Option(min=1, help="KV capacity (default: vLLM's cache_config_info)")
    ] = None,
    speedup: Annotated[float, typer.Option(min=0.001, help="target is an emulator at Nx")] = 1.0,
    description: Annotated[str, typer.Option(help="free text for the profile")] = "",
    device: Annotated[
        str, typer.Option(help="where the engine computes: auto, cpu (records this CPU), gpu")
    ] = "auto",
    kernels: Annotated[
        str | None,
        typer.Option(help="instead of --target: a kernel table (packaged name or CSV path)"),
    ] = None,
    scale_by: Annotated[
        str | None, typer.Option(help="NUM,DEN: derive the table as TABLE x NUM / DEN")
    ] = None,
    shape: Annotated[str, typer.Option(help="--kernels: model shape (name or YAML)")] = "",
    gpu: Annotated[str, typer.Option(help="--kernels: GPU the profile is for")] = "",
    fitted_on: Annotated[
        str | None, typer.Option(help="--kernels: GPU the table was measured on (default --gpu)")
    ] = None,
    tp: Annotated[int, typer.Option(min=1, help="--kernels: tensor-parallel degree")] = 1,
    step_overhead_ms: Annotated[
        float, typer.Option(min=0, help="--kernels: serving overhead per step (assumed)")
    ] = 0.8,
    request_overhead_ms: Annotated[
        float, typer.Option(min=0, help="--kernels: cost per new request (assumed)")
    ] = 1.0,
    link_latency_us: Annotated[
        float, typer.Option(min=0, help="--kernels, TP: latency per all-reduce (assumed)")
    ] = 10.0,
    link_efficiency: Annotated[
        float, typer.Option(min=0.01, max=1, help="--kernels, TP: share of link bandwidth")
    ] = 0.7,
    attempts: Annotated[
        int, typer.Option(min=1, help="probe runs before giving up on a fit that fails its check")
    ] = 3,
    quiet_wait_s: Annotated[
        float,
        typer.Option("--quiet-wait", min=0, help="seconds to wait for an idle machine per attempt"),
    ] = 120.0,
    keep_failed: Annotated[
        bool,
        typer.Option(
            "--keep-failed", help="write the profile even if its check fails (recorded as failed)"
        ),
    ] = False,
) -> None:
    """Fit an emulator profile (step-time model + KV capacity) from a live engine
    (--target), or a GPU profile from measured kernel times (--kernels)."""
    if (target is None) == (kernels is None):
        raise UserError("give one of --target URL (a live engine) or --kernels TABLE")
    if kernels is not None:
        if not shape or not gpu:
            raise UserError(
                "--kernels needs --shape (e.g. llama3-8b) and --gpu (e.g. a100-sxm-80gb)"
            )
        calibrate_from_kernels(
            kernels=kernels, scale_by=scale_by, shape_name=shape, gpu_name=gpu,
            fitted_on=fitted_on, tp=tp, out=out, name=name, description=description,
            step_overhead_s=step_overhead_ms / 1e3, request_overhead_s=request_overhead_ms / 1e3,
            allreduce_latency_s=link_latency_us / 1e6,
            allreduce_efficiency=link_efficiency,
        )  # fmt: skip
        return
    assert target is not None
    if device not in ("auto", "cpu", "gpu"):
        raise UserError(f"--device: auto, cpu or gpu (got {device!r})")
    check_writable(out, "--out")  # before minutes of probes, not after them
    base, card = target_card(target, model)
    served, max_len = str(card["id"]), card.get("max_model_len")
    lengths = _parse_ints(prompt_lengths, "--prompt-lengths")
    batches = _parse_ints(batch_sizes, "--batch-sizes")
    bursts = _parse_ints(burst_sizes, "--burst-sizes")
    if kv_cache_tokens is None:
        cap = kv_capacity_from_metrics(_get(base + "/metrics"))
        if cap is None:
            raise UserError(f"{base}/metrics has no vllm:cache_config_info; pass --kv-cache-tokens")
        kv_cache_tokens = cap[0] * cap[1]
    longest = max(lengths) + 8
    if max_len and longest > max_len:
        raise UserError(f"--prompt-lengths up to {max(lengths)} exceed max_model_len {max_len}")
    t = Target(base, served, speedup)
    local = engine_device(base, "auto") != "unknown"
    bounds = CheckBounds()
    for attempt in range(1, attempts + 1):
        print(f"calibrating {t.model} at {base} (attempt {attempt} of {attempts})")
        busy = wait_until_quiet(bounds.busy_fraction, quiet_wait_s, print) if local else None
        last = attempt == attempts
        if busy is not None and busy > bounds.busy_fraction and not (last and keep_failed):
            why = [f"the machine stayed busy ({busy:.0%} of its CPUs with the engine idle, "
                   f"bound {bounds.busy_fraction:.0%}) for {quiet_wait_s:.0f} s"]  # fmt: skip
            print(f"check: {why[0]}; not probing")
            continue
        samples, chat_extra, ev = asyncio.run(_measure(t, lengths, batches, bursts, repeats, local))
        ev.busy_before = busy
        fitted, quality = fit_step_model(samples)
        why = failures(fitted, ev, bounds)
        check = record(fitted, ev, bounds, attempt, why)
        print(f"check: {'; '.join(why) if why else 'passed'} ({_check_figures(check)})")
        if not why:
            break
    if why and not keep_failed:
        raise UserError(
            f"calibration not written: after {attempts} attempt(s) the fit cannot be trusted: "
            f"{'; '.join(why)}. Run it on an otherwise idle machine (or --keep-failed to "
            "write it anyway, its check recorded as failed)."
        )
    if why:
        print("warning: the fit failed its check; written anyway (--keep-failed)", file=sys.stderr)
    doc: dict[str, Any] = {
        "schema": "burstguard.profile/1",
        "name": name,
        "description": description or f"Fitted by burstguard calibrate against {t.model}.",
        "model": {
            "name": t.model,
            "max_model_len": int(max_len or 2048),
            "chat_template_tokens": chat_extra,
        },
        "fitted": {
            "c0_s": fitted.c0_s,
            "c_prefill_token_s": fitted.c_prefill_token_s,
            "c_decode_seq_s": fitted.c_decode_seq_s,
            "c_context_token_s": fitted.c_context_token_s,
            "c_prefill_seq_s": fitted.c_prefill_seq_s,
            "kv_cache_tokens": int(kv_cache_tokens),
            "machine": machine_section(base, device),
            "fit": {
                **quality,
                "check": check,
                "steps": [asdict(s) for s in samples],
                "held_back_steps": [asdict(s) for s in ev.held_back],
            },
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    print(
        f"step = {fitted.c0_s * 1e3:.2f} ms + {fitted.c_prefill_token_s * 1e6:.1f} us/prefill "
        f"token + {fitted.c_decode_seq_s * 1e3:.2f} ms/decode seq + "
        f"{fitted.c_context_token_s * 1e6:.3f} us/context token + "
        f"{fitted.c_prefill_seq_s * 1e3:.2f} ms/new request; median error prefill "
        f"{quality.get('prefill_median_rel_error', 0):.1%}, burst "
        f"{quality.get('burst_median_rel_error', 0):.1%}, decode "
        f"{quality.get('decode_median_rel_error', 0):.1%}"
    )
    print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
