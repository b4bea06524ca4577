"""A conversation workload (`generate --sessions --turns --think`) runs live against an
emulator with prefix caching as it runs in the simulator: bench sends each turn when the
previous one has answered plus its think time, with the history as the prompt's head, so
the emulator's prefix cache (vLLM's counters) hits as the simulator's does, and TTFT
agrees. Each turn's prompt is the previous prompt + its answer + the new text, by the
emulator's own token counts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import BURSTGUARD, start_emulator

from burstguard.paths import MODEL_NAME
from burstguard.tokenizer import reference_tokenizer_file
from burstguard.wire.records import read_records
from burstguard.workload.traces import load_workload

PROFILE = "smollm2-135m-cpu"  # steps of ~64 ms: the host's own latency is small beside them
SPEEDUP = 10.0
SESSIONS = ["--rate", "0.25", "--duration", "120", "--seed", "7", "--sessions", "40",
            "--turns", "3-4", "--think", "1-3", "--prompt-tokens", "uniform:60-160",
            "--output-tokens", "uniform:16-32"]  # fmt: skip


def run(*args: str) -> None:
    res = subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr


def check_turns(workload: Path, out: Path, completed: int) -> None:
    """Every turn of the run in `out` was sent only after the previous turn's answer plus
    its think time, and its prompt grew by exactly that answer and the new text (by the
    engine's own token counts in the records)."""
    specs = {s.id: s for s in load_workload(workload).specs()}
    records = {r.id: r for r in read_records(out / "records.jsonl")}
    assert len(records) == len(specs) == completed
    for spec in specs.values():
        rec = records[spec.id]
        for before in spec.after:
            prev = records[before]
            assert prev.e2e_s is not None and rec.scheduled_s is not None
            assert rec.scheduled_s >= prev.scheduled_s + prev.e2e_s + spec.think_s - 1e-3
            grown = (rec.prompt_tokens or 0) - (prev.prompt_tokens or 0)
            new = spec.prompt_tokens - specs[before].prompt_tokens - specs[before].max_tokens
            assert grown == (prev.completion_tokens or 0) + new, spec.id


def live_and_sim(
    tmp_path: Path, workload: Path, out: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`workload` on an emulator with prefix caching, served as vLLM serves the reference
    model (bench's records in `out`), and in the sim: the two summaries."""
    emulator = start_emulator(
        tmp_path, "--enable-prefix-caching", "--served-model-name", MODEL_NAME,
        profile=PROFILE, speedup=SPEEDUP,
    )  # fmt: skip
    with emulator:
        run("bench", "--quiet", "--target", emulator.base_url, "--workload", str(workload),  # type: ignore[attr-defined]
            "--speedup", str(SPEEDUP), "--scrape-metrics", "--out", str(out))  # fmt: skip
    sim_json = tmp_path / "sim.json"
    run("sim", "--trace", str(workload), "--profile", PROFILE, "--enable-prefix-caching",
        "--json", str(sim_json))  # fmt: skip
    return json.loads((out / "summary.json").read_text()), json.loads(sim_json.read_text())


def test_sessions_live_match_the_sim(tmp_path: Path) -> None:
    workload = tmp_path / "sessions.jsonl"
    run("generate", "poisson", *SESSIONS, "--out", str(workload))
    out = tmp_path / "live"
    live, sim = live_and_sim(tmp_path, workload, out)

    # the served model is SmolLM2: bench sizes the prompts' words by its tokenizer, where
    # installed (the emulator counts with it too); the estimate's words are one token each
    assert live["prompt_text"]["exact"] == (reference_tokenizer_file() is not None)
    check_turns(workload, out, live["completed"])
    hits = live["prefix_cache"]["hit_rate"], sim["prefix_cache"]["hit_rate"]
    ttft = live["ttft_s"]["p50"], sim["ttft_s"]["p50"]
    p95 = live["ttft_s"]["p95"], sim["ttft_s"]["p95"]
    print(f"prefix-cache hit rate live {hits[0]:.1%} sim {hits[1]:.1%}; TTFT p50 live "
          f"{ttft[0] * 1000:.0f} ms sim {ttft[1] * 1000:.0f} ms, p95 live "
          f"{p95[0] * 1000:.0f} ms sim {p95[1] * 1000:.0f} ms")  # fmt: skip
    assert hits[1] > 0.4 and abs(hits[0] - hits[1]) <= 0.03, hits
    assert abs(ttft[0] - ttft[1]) <= 0.15 * ttft[1], ttft
    assert abs(p95[0] - p95[1]) <= 0.2 * p95[1], p95


AGENTS = ["--rate", "0.2", "--duration", "60", "--seed", "7", "--sessions", "12",
          "--fan-out", "4", "--steps", "2-3", "--think", "0.5-1", "--prompt-tokens",
          "uniform:40-80", "--output-tokens", "uniform:16-32", "--shared-prefix", "128",
          "--prefix-groups", "2"]  # fmt: skip


def test_agent_fan_out_live_matches_the_sim(tmp_path: Path) -> None:
    """Agent runs (`generate --fan-out 4 --steps 2-3`): each step's 4 calls share the run's
    context (its group's prefix, the task, the previous steps' answers) and are fired
    together once the previous step's last call answered plus the think time. Live, the
    emulator's prefix cache (vLLM's counters) serves the shared context as the sim's does,
    and the records show the calls fired together after the step before."""
    workload = tmp_path / "agents.jsonl"
    run("generate", "poisson", *AGENTS, "--out", str(workload))
    out = tmp_path / "live"
    live, sim = live_and_sim(tmp_path, workload, out)

    specs = {s.id: s for s in load_workload(workload).specs()}
    records = {r.id: r for r in read_records(out / "records.jsonl")}
    assert len(records) == len(specs) == live["completed"]
    steps: dict[tuple[str, ...], list[str]] = {}  # a step's calls, by the calls they wait for
    for spec in specs.values():
        if spec.after:
            steps.setdefault(spec.after, []).append(spec.id)
    assert steps and all(len(calls) == 4 for calls in steps.values()), steps
    for before, calls in steps.items():
        done = max((records[b].sent_s or 0.0) + (records[b].e2e_s or 0.0) for b in before)
        for rid in calls:  # released when the step before had all answered, plus the think
            rec, spec = records[rid], specs[rid]
            assert rec.scheduled_s is not None and rec.sent_s is not None
            expected = max(spec.arrival_s, done + spec.think_s)  # (engine s: 0.5 ms at 10x)
            assert abs(rec.scheduled_s - expected) <= 5e-3, (rid, rec.scheduled_s, expected)
        sent = [records[rid].sent_s or 0.0 for rid in calls]
        assert max(sent) - min(sent) <= 0.05, (calls, sent)  # fired together (5 ms)
    hits = live["prefix_cache"]["hit_rate"], sim["prefix_cache"]["hit_rate"]
    print(f"agent fan-out: prefix-cache hit rate live {hits[0]:.1%} sim {hits[1]:.1%}")
    assert hits[1] > 0.4 and abs(hits[0] - hits[1]) <= 0.10, hits
