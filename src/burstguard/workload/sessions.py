"""Sessions: conversations and agent fan-out, as requests that wait for other requests.

Bursts in real traffic are often one client's dependent calls: a chat turn is sent when
the previous one has answered (and the user has read it), with the whole history as its
prompt; an agent fires K calls over one context, waits for all of them, then the next
step. A workload records this per request (`RequestSpec.after`: the ids it waits for,
`think_s`, `arrival_s` as a lower bound), and `Dependencies` is the one rule bench (live)
and the simulator (virtual time) both apply, so that they send the same requests at the
same moments relative to the answers they get.

The prompts share what they should share: every session has a stream of prefix blocks
(after its `--shared-prefix` group's, if any), and a request's `prefix_hashes` are the
stream's blocks that its context covers in full, so bench renders a turn's history as
exactly the text the previous turn sent (`workload.prompts`) and the engine's prefix
cache serves it, live and in the simulator alike. A turn's prompt is the previous prompt
plus the previous answer plus the new user text, by token count; the answer in the
history is the workload's own text of that length (not what the engine generated), so
the prompt is fixed by the workload and the same on every run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from burstguard.errors import ConfigError
from burstguard.wire.prefix import BLOCK_TOKENS, h64
from burstguard.workload.prompts import chat_content_tokens
from burstguard.workload.shapes import sample_labels, sample_lengths
from burstguard.workload.spec import Workload

__all__ = ["Dependencies", "SessionShape", "synthesize_sessions"]


@dataclass(frozen=True)
class SessionShape:
    """`generate --sessions/--turns/--think` or `--fan-out/--steps`: each arrival of the
    pattern starts a session (at most `sessions` of them). A conversation has `turns`
    (A-B, uniform) turns; an agent run (`fan_out` K >= 1) has `steps` steps of K parallel
    calls. `think_s` (A-B seconds, uniform) passes between an answer and the next turn
    (between a step's last answer and the next step)."""

    sessions: int | None = None
    turns: tuple[int, int] = (3, 3)
    think_s: tuple[float, float] = (0.0, 0.0)
    fan_out: int = 0
    steps: tuple[int, int] = (2, 2)

    def check(self) -> None:
        lo, hi = self.think_s
        if not (0 <= lo <= hi < float("inf")):
            raise ConfigError(f"--think {lo:g}-{hi:g}: expected 0 <= A <= B seconds")
        if self.sessions is not None and self.sessions < 1:
            raise ConfigError("--sessions must be >= 1")
        if self.fan_out < 0:
            raise ConfigError("--fan-out must be >= 1")
        for name, (a, b) in (("--turns", self.turns), ("--steps", self.steps)):
            if not 1 <= a <= b:
                raise ConfigError(f"{name} {a}-{b}: expected 1 <= A <= B")


OutputsFor = Callable[[np.ndarray, np.ndarray | None], np.ndarray]
"""(drawn output lengths, per-request classes) -> the lengths after class overrides."""


class SessionSpec(Protocol):
    """What session synthesis reads of a `synth.PatternSpec` (a protocol: synth imports
    this module, not the other way round)."""

    @property
    def pattern(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def sessions(self) -> SessionShape | None: ...
    @property
    def prompt_tokens(self) -> str: ...
    @property
    def output_tokens(self) -> str: ...
    @property
    def classes(self) -> str | None: ...
    @property
    def tenants(self) -> str | None: ...
    @property
    def shared_prefix_tokens(self) -> int: ...
    @property
    def prefix_groups(self) -> int: ...


def synthesize_sessions(
    spec: SessionSpec, starts: np.ndarray, rng: np.random.Generator, outputs_for: OutputsFor
) -> Workload:
    """Sessions starting at the pattern's arrivals `starts`: conversations, or agent runs
    with `shape.fan_out` calls a step. New text (a turn's user text, a call's own
    instruction, an agent's task) is drawn from `--prompt-tokens`, answers from
    `--output-tokens`; class and tenant are drawn per session."""
    shape = spec.sessions
    assert shape is not None
    shape.check()
    starts = starts[: shape.sessions] if shape.sessions is not None else starts
    n = int(starts.size)
    agent = shape.fan_out > 0
    calls = shape.fan_out if agent else 1
    lo, hi = shape.steps if agent else shape.turns
    rounds = rng.integers(lo, hi + 1, n)
    total = int(rounds.sum()) * calls
    new = sample_lengths(spec.prompt_tokens, total, rng).tolist()
    out_drawn = sample_lengths(spec.output_tokens, total, rng)
    think = rng.uniform(shape.think_s[0], shape.think_s[1], int(rounds.sum())).tolist()
    task = sample_lengths(spec.prompt_tokens, n, rng).tolist() if agent else [0] * n
    labels = sample_labels(spec.classes, n, rng) if spec.classes else None
    tenants = sample_labels(spec.tenants, n, rng) if spec.tenants else None
    shared = spec.shared_prefix_tokens
    member = rng.integers(0, spec.prefix_groups, n).tolist() if shared else [0] * n
    per_request = np.repeat(np.arange(n), rounds * calls)
    out = outputs_for(out_drawn, None if labels is None else labels[per_request]).tolist()

    group_blocks = [
        [h64(f"shared-prefix/{spec.seed}/{g}/{b}".encode()) for b in range(shared // BLOCK_TOKENS)]
        for g in range(spec.prefix_groups if shared else 1)
    ]
    rows: list[tuple[float, int, int, str, str, int, tuple[str, ...], float, tuple[int, ...]]] = []
    r = t = 0  # request and round counters
    for j in range(n):
        sid = f"a{j}" if agent else f"s{j}"
        stream = _Stream(spec.seed, j, group_blocks[member[j]])
        at = float(starts[j])
        context = shared + task[j]  # an agent's shared context (tokens)
        prompt = shared  # a conversation's prompt so far
        before: tuple[str, ...] = ()
        for k in range(int(rounds[j])):
            wait = think[t] if k else 0.0
            at += wait
            t += 1
            ids = []
            answered = 0
            for c in range(calls):
                if agent:
                    rid = f"{sid}-s{k}-c{c}"
                    p = context + new[r]
                    covered = min(context, chat_content_tokens(p))
                    answered += out[r]
                else:
                    rid = f"{sid}-t{k}"
                    p = prompt + new[r]
                    covered = chat_content_tokens(p)
                    prompt = p + out[r]
                rows.append((at, p, out[r], rid, sid, k, before, wait,
                             stream.blocks(covered // BLOCK_TOKENS)))  # fmt: skip
                ids.append(rid)
                r += 1
            context += answered
            before = tuple(ids)
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    rows = [rows[i] for i in order]
    who = per_request[order]
    meta: dict[str, object] = {
        "pattern": spec.pattern, "seed": spec.seed, "sessions": n,
        "session_kind": "agent" if agent else "conversation", "block_tokens": BLOCK_TOKENS,
        "session_rate_rps": n / spec.duration_s,
        "think_s": list(shape.think_s),
        **({"fan_out": calls, "steps": list(shape.steps)} if agent
           else {"turns": list(shape.turns)}),
        **({"shared_prefix_tokens": shared, "prefix_groups": spec.prefix_groups}
           if shared else {}),
    }  # fmt: skip
    return Workload(
        arrival_s=np.array([row[0] for row in rows], dtype=np.float64),
        prompt_tokens=np.array([row[1] for row in rows], dtype=np.int64),
        output_tokens=np.array([row[2] for row in rows], dtype=np.int64),
        priority_class=None if labels is None else labels[who],
        tenant=None if tenants is None else tenants[who],
        prefix_hashes=[row[8] for row in rows],
        ids=np.array([row[3] for row in rows], dtype=object),
        source=f"synthetic:{spec.pattern}:{'agents' if agent else 'sessions'}",
        meta=meta,
        session=np.array([row[4] for row in rows], dtype=object),
        turn=np.array([row[5] for row in rows], dtype=np.int64),
        after=[row[6] for row in rows],
        think_s=np.array([row[7] for row in rows], dtype=np.float64),
    )


class _Stream:
    """A session's prefix blocks: its shared-prefix group's, then its own, named per
    (seed, session, block) so that no two sessions share more than their group's."""

    def __init__(self, seed: int, session: int, head: list[int]) -> None:
        self.key = f"session/{seed}/{session}/"
        self.hashes = list(head)

    def blocks(self, n: int) -> tuple[int, ...]:
        while len(self.hashes) < n:
            self.hashes.append(h64(f"{self.key}{len(self.hashes)}".encode()))
        return tuple(self.hashes[:n])


class Dependencies:
    """Which requests wait for which, for one run (it counts answers: one per run).

    A request with `after` is released when the last of those requests has ended (answered,
    or failed: a session goes on), at max(`arrival_s`, that end + `think_s`). `group` numbers
    the connected sessions in order of first request, so a shard of the schedule
    (`bench --shard`, `--workers`) takes whole sessions and never waits for a request
    another machine sends."""

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        after = workload.after if workload.after is not None else [()] * n
        index = {workload.request_id(i): i for i in range(n)}
        self.children: list[list[int]] = [[] for _ in range(n)]
        self.waiting = [0] * n
        parent = list(range(n))  # union-find: sessions as connected components

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, wanted in enumerate(after):
            for rid in dict.fromkeys(wanted):
                j = index.get(rid)
                if j is None or j == i:
                    what = "itself" if j == i else f"{rid!r}, which is not in the workload"
                    raise ConfigError(f"request {workload.request_id(i)!r} waits for {what}")
                self.children[j].append(i)
                self.waiting[i] += 1
                a, b = find(i), find(j)
                parent[max(a, b)] = min(a, b)
        self.roots = [i for i in range(n) if self.waiting[i] == 0]
        self._check_acyclic(workload)
        numbers: dict[int, int] = {}
        self.group = [numbers.setdefault(find(i), len(numbers)) for i in range(n)]
        self.arrival = workload.arrival_s.tolist()
        self.think = [0.0] * n if workload.think_s is None else workload.think_s.tolist()
        self.ended_at = [0.0] * n  # the latest end among a request's predecessors so far

    @staticmethod
    def of(workload: Workload) -> Dependencies | None:
        """The workload's dependencies; None when no request waits for another."""
        if workload.after is None or not any(workload.after):
            return None
        return Dependencies(workload)

    def _check_acyclic(self, workload: Workload) -> None:
        left = list(self.waiting)
        ready = list(self.roots)
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for c in self.children[i]:
                left[c] -= 1
                if left[c] == 0:
                    ready.append(c)
        if seen < len(left):
            stuck = next(i for i, k in enumerate(left) if k > 0)
            raise ConfigError(
                f"request {workload.request_id(stuck)!r} waits in a cycle: `after` must "
                "name earlier requests of its session"
            )

    def ended(self, i: int, now: float) -> list[tuple[int, float]]:
        """Request `i` ended at `now`: the requests this releases, each with its send time."""
        out = []
        for c in self.children[i]:
            self.waiting[c] -= 1
            self.ended_at[c] = max(self.ended_at[c], now)
            if self.waiting[c] == 0:
                out.append((c, max(self.arrival[c], self.ended_at[c] + self.think[c])))
        return out

    def mine(self, shard: tuple[int, int]) -> list[int]:
        """The roots shard (K, N) sends: those of sessions K, K + N, ..."""
        k, n = shard
        return [i for i in self.roots if self.group[i] % n == k]
