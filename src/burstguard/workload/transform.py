"""Workload transforms: take a subset, slice a time window, replay faster, scale token
lengths, merge traces."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from burstguard.errors import ConfigError
from burstguard.workload.spec import Workload


def take(workload: Workload, index: np.ndarray) -> Workload:
    """The requests at `index` (an integer or boolean array), every column kept."""
    index = np.asarray(index)
    if index.dtype == bool:
        index = np.flatnonzero(index)

    def pick(column: np.ndarray | None) -> np.ndarray | None:
        return None if column is None else column[index]

    return Workload(
        arrival_s=workload.arrival_s[index],
        prompt_tokens=workload.prompt_tokens[index],
        output_tokens=workload.output_tokens[index],
        priority_class=pick(workload.priority_class),
        tenant=pick(workload.tenant),
        prefix_hashes=None
        if workload.prefix_hashes is None
        else [workload.prefix_hashes[i] for i in index.tolist()],
        failed=pick(workload.failed),
        ids=pick(workload.ids),
        source=workload.source,
        meta=dict(workload.meta),
        session=pick(workload.session),
        turn=pick(workload.turn),
        after=None if workload.after is None else _kept_after(workload, index),
        think_s=pick(workload.think_s),
    )


def _kept_after(workload: Workload, index: np.ndarray) -> list[tuple[str, ...]]:
    """The `after` lists of the requests at `index`, without the ids not taken (a window
    cut off a session's earlier turns: what is left waits only for what is left)."""
    assert workload.after is not None
    rows = index.tolist()
    kept = {workload.request_id(i) for i in rows}
    return [tuple(a for a in workload.after[i] if a in kept) for i in rows]


def slice_window(
    workload: Workload, start_s: float = 0.0, end_s: float | None = None, rebase: bool = True
) -> Workload:
    """Requests arriving in [start_s, end_s); with `rebase` the window starts at 0 s."""
    if end_s is not None and end_s <= start_s:
        raise ConfigError(f"empty time window: end {end_s} s is not after start {start_s} s")
    lo = np.searchsorted(workload.arrival_s, start_s, side="left")
    hi = len(workload) if end_s is None else np.searchsorted(workload.arrival_s, end_s, "left")
    out = take(workload, np.arange(lo, hi))
    if rebase:
        out.arrival_s = out.arrival_s - start_s
    out.meta["window_s"] = [start_s, end_s]
    return out


def scale_rate(workload: Workload, speed: float) -> Workload:
    """Replays `workload` at `speed` x its rate: every arrival time is divided by `speed`."""
    if not 0 < speed < math.inf:
        raise ConfigError(f"speed must be a finite number > 0, got {speed}")
    out = take(workload, np.arange(len(workload)))
    out.arrival_s = workload.arrival_s / speed
    if out.think_s is not None:  # a session's pace scales with its arrivals
        out.think_s = out.think_s / speed
    before = workload.meta.get("speed", 1.0)
    out.meta["speed"] = speed * (float(before) if isinstance(before, int | float) else 1.0)
    return out


def scale_tokens(workload: Workload, prompt: float = 1.0, output: float = 1.0) -> Workload:
    """Multiplies prompt and output lengths (rounded, at least 1 token): a trace recorded
    on a big deployment, sized to a small engine while keeping its arrivals and the shape
    of its length distributions. Prefix blocks scale with the prompts where they can: when
    `prompt` x the block size is a whole number of tokens (a Mooncake trace's 512-token
    blocks at 1/16: 32 tokens), the hashes stay and name blocks of that size, so the
    scaled trace shares what the original shares, block for block; otherwise they no
    longer match the prompts and are dropped."""
    if not (0 < prompt < math.inf and 0 < output < math.inf):
        raise ConfigError(
            f"token scales must be finite numbers > 0, got prompt {prompt}, output {output}"
        )
    out = take(workload, np.arange(len(workload)))
    out.prompt_tokens = np.maximum(1, np.rint(workload.prompt_tokens * prompt)).astype(np.int64)
    out.output_tokens = np.maximum(1, np.rint(workload.output_tokens * output)).astype(np.int64)
    if prompt != 1.0 and out.prefix_hashes is not None:
        block = workload.prefix_block_tokens * prompt
        if block >= 1 and abs(block - round(block)) < 1e-9:
            out.meta["block_tokens"] = round(block)
        else:
            out.prefix_hashes = None
    out.meta["token_scale"] = {"prompt": prompt, "output": output}
    return out


def merge(workloads: Sequence[Workload]) -> Workload:
    """One workload holding every request of `workloads`, ordered by arrival.

    Request ids are prefixed with the input's position ("0:r12", "1:r12") so that they
    stay unique; optional columns missing from some inputs are filled with None / False.
    """
    if not workloads:
        raise ConfigError("merge needs at least one workload")
    n = [len(w) for w in workloads]

    def labels(name: str) -> np.ndarray | None:
        if all(getattr(w, name) is None for w in workloads):
            return None
        parts = [
            getattr(w, name) if getattr(w, name) is not None else np.full(k, None, object)
            for w, k in zip(workloads, n, strict=True)
        ]
        return np.concatenate([np.asarray(p, dtype=object) for p in parts])

    ids = np.asarray(
        [f"{k}:{w.request_id(i)}" for k, w in enumerate(workloads) for i in range(len(w))],
        dtype=object,
    )
    has_prefix = any(w.prefix_hashes is not None for w in workloads)
    has_after = any(w.after is not None for w in workloads)
    has_failed = any(w.failed is not None for w in workloads)
    merged = Workload(
        arrival_s=np.concatenate([w.arrival_s for w in workloads]),
        prompt_tokens=np.concatenate([w.prompt_tokens for w in workloads]),
        output_tokens=np.concatenate([w.output_tokens for w in workloads]),
        priority_class=labels("priority_class"),
        tenant=labels("tenant"),
        prefix_hashes=[
            tuple(h)
            for w, k in zip(workloads, n, strict=True)
            for h in (w.prefix_hashes if w.prefix_hashes is not None else [()] * k)
        ]
        if has_prefix
        else None,
        failed=np.concatenate([_flags(w) for w in workloads]) if has_failed else None,
        ids=ids,
        source=" + ".join(w.source for w in workloads),
        meta={"merged": [w.source for w in workloads]},
        session=labels("session"),
        turn=np.concatenate([_turns(w) for w in workloads]) if has_after else None,
        after=[
            tuple(f"{k}:{a}" for a in w.after[i]) if w.after is not None else ()
            for k, w in enumerate(workloads)
            for i in range(len(w))
        ]
        if has_after
        else None,
        think_s=np.concatenate([_think(w) for w in workloads]) if has_after else None,
    )
    if merged.session is not None:  # sessions stay apart as the ids do
        merged.session = np.asarray(
            [None if s is None else f"{k}:{s}" for k, w in enumerate(workloads)
             for s in (w.session if w.session is not None else [None] * len(w))],
            dtype=object,
        )  # fmt: skip
    return take(merged, np.argsort(merged.arrival_s, kind="stable"))


def _turns(workload: Workload) -> np.ndarray:
    return workload.turn if workload.turn is not None else np.zeros(len(workload), np.int64)


def _think(workload: Workload) -> np.ndarray:
    return workload.think_s if workload.think_s is not None else np.zeros(len(workload))


def _flags(workload: Workload) -> np.ndarray:
    if workload.failed is not None:
        return workload.failed
    return np.zeros(len(workload), dtype=bool)


def window_and_speed(
    workload: Workload,
    window: str | None,
    speed: float,
    prompt_scale: float = 1.0,
    output_scale: float = 1.0,
) -> Workload:
    """The trace flags of analyze and bench (`--window START-END`, `--speed K`,
    `--prompt-scale F`, `--output-scale F`), applied."""
    if window:
        start, sep, end = window.partition("-")
        try:
            workload = slice_window(workload, float(start), float(end) if sep else None)
        except ValueError:
            raise ConfigError(f"--window {window!r}: expected START-END in seconds") from None
    if prompt_scale != 1.0 or output_scale != 1.0:
        workload = scale_tokens(workload, prompt_scale, output_scale)
    return scale_rate(workload, speed) if speed != 1.0 else workload
