"""The five steps of the seed's troubleshooting order, each a pure function of a run.

Each step says found / not found / cannot tell (naming the data it lacked), carries its
evidence as numbers, and the seed's fixes as concrete flags and values. The steps read
the engine's series the way an operator reads a dashboard: a sample is *queued* when the
waiting queue is non-empty, *at the slot cap* when the running count is at max-num-seqs
(or, when the setting is unknown, the highest running count seen), *KV full* at the
90% mark of the KV cache (the seed keeps 10-20% headroom).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from burstguard.bench.compare import queue_drain
from burstguard.diagnose.run import RunData

Status = Literal["found", "not_found", "cannot_tell"]
Cause = Literal["retry_storm", "queue", "batch_building", "kv_memory", "scaling_lag"]
ORDER: tuple[Cause, ...] = ("retry_storm", "queue", "batch_building", "kv_memory", "scaling_lag")


@dataclass(frozen=True, slots=True)
class Limits:
    """Where a symptom starts to count. The defaults call healthy runs healthy."""

    retry_amplification: float = 1.1  # attempts per request
    queue_s: float = 1.0  # peak to empty (s): twice the seed's 0.5 s TTFT target
    kv_full: float = 0.90  # KV usage from here is full (the seed: keep 10-20% headroom)
    share: float = 0.5  # share of queued samples a cause must explain
    scaling_lag_s: float = 30.0  # queue this long before a replica is added


@dataclass(frozen=True, slots=True)
class Fix:
    """One concrete change: `flag` and `value` where it goes (`where`), and why."""

    where: str  # "vllm serve", "client", "gateway" or "deployment"
    flag: str
    value: str
    why: str


@dataclass(frozen=True, slots=True)
class Finding:
    step: Cause
    status: Status
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.status == "found"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), digits)


def _interval(t: np.ndarray) -> float:
    return float(np.median(np.diff(t))) if t.size > 1 else 1.0


# --- before the walk: requests a tenant's quota refused ----------------------------------

QUOTA_ERROR = "quota_exceeded"  # the gateway's 429 code (wire.outcomes.Reason.QUOTA)


def over_quota(run: RunData) -> list[dict[str, Any]]:
    """Tenants whose quota refused requests, most refused first: from the summary's
    `gateway.quota` block (`burstguard sim --gateway`), else from records whose error is
    `quota_exceeded` (sim) or whose 429 said so (bench's `error_code`). Each names its share
    of all the run's 429s: when quotas refused them, the gateway did what it was told, and
    no engine setting will change it."""
    gw = run.summary.get("gateway")
    block = gw.get("quota") if isinstance(gw, dict) else None
    refused: dict[str, tuple[int, int]] = {}
    if isinstance(block, dict) and isinstance(block.get("tenants"), dict):
        for tenant, row in block["tenants"].items():
            if isinstance(row, dict) and row.get("refused_requests"):
                refused[tenant] = (int(row["refused_requests"]), int(row.get("refused_tokens", 0)))
    else:
        for rec in run.records:
            if QUOTA_ERROR in (rec.error, rec.error_code):  # sim; bench's 429 body
                n, t = refused.get(rec.tenant or "default", (0, 0))
                refused[rec.tenant or "default"] = (n + 1, t + (rec.prompt_tokens or 0))
    shed = sum(1 for r in run.records if r.status == 429)
    if not shed and isinstance(gw, dict):
        shed = sum(int(c.get("rejected") or 0) for c in (gw.get("classes") or {}).values())
    out = []
    for tenant, (n, tokens) in sorted(refused.items(), key=lambda kv: -kv[1][0]):
        share = n / shed if shed else None
        out.append({"tenant": tenant, "refused_requests": n, "refused_tokens": tokens,
                    "share_of_429": _r(share)})  # fmt: skip
    return out


# --- 1. retry storm --------------------------------------------------------------------


def retry_storm(run: RunData, lim: Limits) -> Finding:
    """Attempts per request, retries bunched in time, and what the tries failed with."""
    s = run.summary
    requests = int(s.get("requests") or 0)
    if "retries" not in s or requests == 0:
        return Finding(
            "retry_storm",
            "cannot_tell",
            "no request counts in this run",
            missing=["the run's requests and retries (a bench summary)"],
        )
    retries = int(s["retries"])
    attempts = int(s.get("attempts") or requests + retries)
    amplification = attempts / requests
    kinds: dict[str, int] = {}
    retry_times: list[float] = []
    for rec in run.records:
        for a in rec.attempts:
            kind = a.get("error") or f"http_{a.get('status')}"
            kinds[kind] = kinds.get(kind, 0) + 1
            if a.get("retry_s") is not None:
                retry_times.append(float(a["retry_s"]))
        if rec.error:
            kinds[rec.error] = kinds.get(rec.error, 0) + 1
    evidence: dict[str, Any] = {
        "requests": requests,
        "attempts": attempts,
        "attempts_per_request": _r(amplification),
        "retried_requests": sum(1 for r in run.records if r.retries) if run.records else None,
        "failed_tries_by_kind": kinds,
        "http_429": kinds.get("http_429", 0),
        "timeouts": kinds.get("timeout", 0),
    }
    if retry_times:
        t = np.asarray(retry_times)
        per_s = np.bincount((t - t.min()).astype(np.int64))
        evidence["retries_peak_per_s"] = int(per_s.max())
        evidence["retries_mean_per_active_s"] = _r(float(per_s[per_s > 0].mean()))
        # var/mean of per-second retry counts: 1 for independent retries, >> 1 in waves
        mean = float(per_s.mean())
        evidence["retry_dispersion"] = _r(float(per_s.var()) / mean if mean > 0 else None)
    mode = (s.get("retry") or {}).get("mode") if isinstance(s.get("retry"), dict) else None
    evidence["client_retry_mode"] = mode
    if amplification < lim.retry_amplification:
        note = "the simulated clients do not retry" if run.source == "sim" else ""
        return Finding(
            "retry_storm",
            "not_found",
            f"{amplification:.2f} attempts per request" + (f" ({note})" if note else ""),
            evidence,
        )
    fixes = [
        Fix(
            "client",
            "--retry",
            "exponential",
            "back off exponentially with full jitter instead of retrying at once",
        ),
        Fix(
            "client",
            "--retry-base / --retry-cap",
            "0.5 / 8",
            "seconds: the first delay and the ceiling of the backoff",
        ),
        Fix(
            "client",
            "--retry-budget",
            "0.2",
            "at most 0.2 retries per request across the client: a storm cannot multiply load",
        ),
        Fix("client", "--honor-retry-after", "on", "wait as long as a 429 says"),
        Fix(
            "gateway",
            "burstguard gateway",
            "in front of the engine",
            "hold the queue, shed early with 429 + a computed Retry-After",
        ),
    ]
    if evidence["timeouts"]:
        fixes.append(
            Fix(
                "client",
                "--timeout",
                "above the burst's P99 E2E",
                "a try that times out is retried while the first one still runs",
            )
        )
    summary = (
        f"{amplification:.2f} attempts per request ({attempts - requests} retries, "
        f"{evidence['http_429']} HTTP 429, {evidence['timeouts']} timeouts)"
    )
    return Finding("retry_storm", "found", summary, evidence, fixes=fixes)


# --- 2. queue ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Queued:
    """The run's samples, split the way steps 2-4 need them."""

    t: np.ndarray
    dt: float
    queued: np.ndarray  # waiting > 0
    cap: float | None  # max-num-seqs, or the highest running count seen
    cap_known: bool
    at_cap: np.ndarray | None
    kv_full: np.ndarray | None  # KV usage >= Limits.kv_full; below it, KV has room


def _split(run: RunData, lim: Limits) -> _Queued | None:
    if not run.has_series or run.waiting is None:
        return None
    assert run.t is not None
    t, waiting = run.t, np.nan_to_num(run.waiting)
    cap: float | None = None
    known = isinstance(run.engine.get("max_num_seqs"), int)
    at_cap = None
    if known:
        cap = float(run.engine["max_num_seqs"])
    elif run.running is not None and np.any(np.isfinite(run.running)):
        cap = float(np.nanmax(run.running))
    if cap is not None and run.running is not None:
        # a scrape right after a step that finished requests sees a slot or two free
        at_cap = np.nan_to_num(run.running) >= cap - np.floor(0.1 * cap)
    kv_full = None if run.kv is None else np.nan_to_num(run.kv) >= lim.kv_full
    return _Queued(t, _interval(t), waiting > 0.5, cap, known, at_cap, kv_full)


def queue(run: RunData, lim: Limits) -> Finding:
    """Engine waiting queue (or the gateway's) growing, and how long it takes to drain."""
    split = _split(run, lim)
    if split is None or run.waiting is None:
        return Finding(
            "queue",
            "cannot_tell",
            "no queue series in this run",
            missing=[
                "vllm:num_requests_waiting or llm_request_queue_depth "
                "(bench --scrape-metrics, or --scenario)"
            ],
        )
    waiting = np.nan_to_num(run.waiting)
    drain = queue_drain(split.t, waiting, 0.0)
    queued_s = float(split.queued.sum()) * split.dt
    queue_wait = run.summary.get("queue_s")
    evidence: dict[str, Any] = {
        "peak_waiting": _r(drain.peak, 1),
        "queued_s": _r(queued_s, 2),
        "episodes": len(drain.drain_s),
        "drain_s_max": _r(max(drain.drain_s, default=0.0), 2),
        "drain_s_each": [_r(d, 2) for d in drain.drain_s[:20]],
        "undrained_at_end": drain.undrained,
        "sample_interval_s": _r(split.dt),
        "engine_queue_wait_p95_s": _r(queue_wait.get("p95"))
        if isinstance(queue_wait, dict) and queue_wait.get("p95") is not None
        else None,
    }
    worst = max(drain.drain_s, default=0.0)
    if worst < max(lim.queue_s, 2 * split.dt) and not drain.undrained:
        return Finding(
            "queue",
            "not_found",
            f"no lasting queue: peak {drain.peak:.0f} waiting, empty again within "
            f"{worst:.1f} s ({split.dt:.1f} s between samples)",
            evidence,
        )
    share = None
    if split.at_cap is not None and split.queued.any():
        share = float((split.queued & split.at_cap).sum() / split.queued.sum())
    evidence["running_cap"] = _r(split.cap, 0)
    evidence["running_cap_known"] = split.cap_known
    evidence["queued_at_slot_cap_share"] = _r(share)
    state = (
        "still queued when the run ended"
        if drain.undrained
        else (f"drained {max(drain.drain_s, default=0.0):.1f} s after its worst peak")
    )
    summary = (
        f"up to {drain.peak:.0f} waiting, queue non-empty for {queued_s:.1f} s "
        f"in {len(drain.drain_s)} episodes, {state}"
    )
    cap = int(split.cap) if split.cap else None
    fixes = [
        Fix(
            "vllm serve",
            "--max-num-seqs",
            str(2 * cap) if cap else "higher",
            "more slots, while the KV cache has room for them (see the KV step)",
        ),
        Fix(
            "gateway",
            "burstguard gateway",
            "in front of the engine",
            "queue and order at the gateway, admit by the engine's own metrics, shed early",
        ),
        Fix(
            "deployment",
            "replicas / KEDA",
            "scale on vllm:num_requests_waiting",
            "add capacity when the queue grows, not when CPU does",
        ),
    ]
    return Finding("queue", "found", summary, evidence, fixes=fixes)


# --- 3. batch building ----------------------------------------------------------------


def _tokens_per_step(run: RunData, mask: np.ndarray) -> float | None:
    """Mean tokens per engine step over the sample intervals that begin and end in `mask`
    (an interval that only ends there mostly holds the steps before the queue formed)."""
    if run.step_tokens is None or run.steps is None:
        return None
    d_tokens = np.diff(np.nan_to_num(run.step_tokens))
    d_steps = np.diff(np.nan_to_num(run.steps))
    sel = mask[1:] & mask[:-1] & (d_steps > 0)
    if not sel.any():
        return None
    return float(d_tokens[sel].sum() / d_steps[sel].sum())


def _prompt_p95(run: RunData) -> float | None:
    prompts = [r.prompt_tokens for r in run.records if r.prompt_tokens]
    if prompts:
        return float(np.percentile(prompts, 95))
    s = run.summary
    if s.get("completed") and s.get("input_tokens"):
        return float(s["input_tokens"]) / float(s["completed"])  # a mean, without records
    return None


def batch_building(run: RunData, lim: Limits, queue_found: bool) -> Finding:
    """Waiting > 0 while running < max-num-seqs and the KV cache has room: the step's
    token budget or the prefill is what holds requests back."""
    split = _split(run, lim)
    if split is None or split.at_cap is None:
        return Finding(
            "batch_building",
            "cannot_tell",
            "no running-requests series",
            missing=["vllm:num_requests_running (bench --scrape-metrics)"],
        )
    if not queue_found:
        return Finding("batch_building", "not_found", "no queue for batch building to explain")
    q = split.queued
    room = ~split.kv_full if split.kv_full is not None else np.ones_like(q)
    below = q & ~split.at_cap & room
    share = float(below.sum() / q.sum()) if q.any() else 0.0
    budget = run.engine.get("max_num_batched_tokens")
    chunked = run.engine.get("enable_chunked_prefill")
    per_step = _tokens_per_step(run, q)
    prompt = _prompt_p95(run)
    assert run.running is not None
    evidence: dict[str, Any] = {
        "queued_below_slot_cap_with_kv_room_share": _r(share),
        "running_cap": _r(split.cap, 0),
        "running_cap_known": split.cap_known,
        "running_while_queued_p50": _r(float(np.median(run.running[q])), 1) if q.any() else None,
        "tokens_per_step_while_queued": _r(per_step, 1),
        "max_num_batched_tokens": budget,
        "enable_chunked_prefill": chunked,
        "prompt_tokens_p95": _r(prompt, 0),
    }
    missing = []
    if split.kv_full is None:
        missing.append("vllm:kv_cache_usage_perc (KV room assumed)")
    if per_step is None:
        missing.append(
            "tokens per step while queued (vllm:iteration_tokens_total, and "
            "a queue lasting two samples)"
        )
    if not split.cap_known:
        missing.append("the engine's --max-num-seqs (taken as the highest running count seen)")
    if share < lim.share:
        return Finding(
            "batch_building",
            "not_found",
            f"{share:.0%} of queued samples had free slots and KV room",
            evidence,
            missing,
        )
    summary = f"{share:.0%} of queued samples had free slots and KV room"
    if per_step is not None:
        summary += f"; {per_step:.0f} tokens per step"
        if isinstance(budget, int):
            summary += f" of a {budget}-token budget"
    if chunked is False:
        summary += "; chunked prefill off: a long prompt must fit one step whole"
    bigger = max(8192, 2 * budget) if isinstance(budget, int) else 8192
    if prompt is not None:
        bigger = max(bigger, int(2 ** np.ceil(np.log2(max(prompt, 1) * 4))))
    fixes = [
        Fix(
            "vllm serve",
            "--enable-chunked-prefill",
            "on",
            "split long prefills across steps; decodes go first, admission keeps going",
        ),
        Fix(
            "vllm serve",
            "--max-num-batched-tokens",
            str(bigger),
            "a step's token budget that holds several prompts at once",
        ),
    ]
    if prompt is not None and isinstance(budget, int) and prompt > budget / 2:
        fixes.append(
            Fix(
                "gateway",
                "long prompts",
                "own class or replica",
                f"prompts of ~{prompt:.0f} tokens fill a {budget}-token step alone",
            )
        )
    return Finding("batch_building", "found", summary, evidence, missing, fixes)


# --- 4. KV memory -----------------------------------------------------------------------


def kv_memory(run: RunData, lim: Limits) -> Finding:
    """KV usage at the ceiling, preemptions, and requests waiting with free slots."""
    preempted = run.preemptions()
    split = _split(run, lim)
    if (run.kv is None or split is None) and preempted is None:
        return Finding(
            "kv_memory",
            "cannot_tell",
            "no KV usage or preemption data",
            missing=[
                "vllm:kv_cache_usage_perc and vllm:num_preemptions_total (bench --scrape-metrics)"
            ],
        )
    evidence: dict[str, Any] = {"preemptions": _r(preempted, 0)}
    full_share = None
    if run.kv is not None and split is not None and split.kv_full is not None:
        kv = np.nan_to_num(run.kv)
        evidence["kv_peak"] = _r(float(kv.max()))
        evidence["kv_full_s"] = _r(float(split.kv_full.sum()) * split.dt, 2)
        q = split.queued
        if q.any():
            full_share = float((q & split.kv_full).sum() / q.sum())
            evidence["queued_with_kv_full_share"] = full_share
            if split.at_cap is not None:
                free = q & split.kv_full & ~split.at_cap
                evidence["waiting_with_free_slots_and_kv_full_s"] = _r(
                    float(free.sum()) * split.dt, 2
                )
    peak = evidence.get("kv_peak")
    full = peak is not None and peak >= lim.kv_full
    if not full and not preempted:
        text = "no preemptions" + (f", KV peak {peak:.0%}" if peak is not None else "")
        return Finding("kv_memory", "not_found", text, evidence)
    gmu = run.engine.get("gpu_memory_utilization")
    raise_to = "0.85" if not isinstance(gmu, int | float) or gmu < 0.85 else None
    fixes = []
    if raise_to is not None:
        fixes.append(
            Fix(
                "vllm serve",
                "--gpu-memory-utilization",
                raise_to,
                f"more KV cache{f' than {gmu:g}' if gmu else ''}, still leaving "
                "10-20% of GPU memory as headroom (0.80-0.90)",
            )
        )
    running_full = None
    if split is not None and split.kv_full is not None and run.running is not None:
        sel = split.kv_full
        if sel.any():
            running_full = int(np.median(run.running[sel]))
    evidence["running_while_kv_full_p50"] = running_full
    fixes += [
        Fix(
            "vllm serve",
            "--max-num-seqs",
            str(max(1, int(running_full * 0.8))) if running_full else "lower",
            "fewer sequences than the KV cache can hold at once: queue instead of preempt",
        ),
        Fix(
            "vllm serve",
            "--max-model-len",
            "the longest prompt + output you serve",
            "a shorter context leaves blocks for more sequences",
        ),
        Fix("vllm serve", "--kv-cache-dtype", "fp8", "half the KV bytes per token"),
        Fix(
            "gateway",
            "burstguard gateway",
            "admission by KV usage",
            "hold requests at the gateway while the engine's KV cache is near full",
        ),
    ]
    bits = []
    if peak is not None:
        bits.append(f"KV peak {peak:.0%} (full for {evidence['kv_full_s']:.1f} s)")
    if preempted:
        bits.append(f"{preempted:.0f} preemptions")
    if full_share:
        bits.append(f"{full_share:.0%} of queued samples with KV full")
    return Finding("kv_memory", "found", ", ".join(bits), evidence, fixes=fixes)


# --- 5. scaling lag -------------------------------------------------------------------


def scaling_lag(run: RunData, lim: Limits, queue_found: bool) -> Finding:
    """A queue that grows while the replica count stays flat (or rises late)."""
    if run.replicas is None or not run.has_series:
        return Finding(
            "scaling_lag",
            "cannot_tell",
            "no replica series in this run",
            missing=["a replica count series (`replicas`): a fleet or autoscaler run"],
        )
    replicas = np.nan_to_num(run.replicas)
    evidence: dict[str, Any] = {
        "replicas_min": _r(float(replicas.min()), 0),
        "replicas_max": _r(float(replicas.max()), 0),
    }
    if not queue_found or run.waiting is None or run.t is None:
        return Finding("scaling_lag", "not_found", "no queue for scaling to answer", evidence)
    t, queued = run.t, np.nan_to_num(run.waiting) > 0.5
    first = int(np.argmax(queued))
    rises = np.nonzero(np.diff(replicas[first:]) > 0)[0]
    lag = float(t[first + rises[0] + 1] - t[first]) if rises.size else float(t[-1] - t[first])
    evidence["queue_start_s"] = _r(float(t[first]), 2)
    evidence["first_scale_up_after_s"] = _r(lag, 2) if rises.size else None
    if lag < lim.scaling_lag_s:
        return Finding(
            "scaling_lag",
            "not_found",
            f"a replica was added {lag:.0f} s after the queue formed",
            evidence,
        )
    text = (
        f"queue for {lag:.0f} s before a replica was added"
        if rises.size
        else f"no replica added in the {lag:.0f} s the queue lasted"
    )
    fixes = [
        Fix(
            "deployment",
            "KEDA trigger",
            "llm_request_queue_depth or arrival rate",
            "scale on the queue, which leads, not on utilisation, which lags",
        ),
        Fix(
            "deployment",
            "minReplicaCount / warm pool",
            "+1 replica",
            "a cold start (model load) is longer than a burst",
        ),
    ]
    return Finding("scaling_lag", "found", text, evidence, fixes=fixes)
