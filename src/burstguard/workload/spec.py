"""The request spec: the contract between workload, bench, engine, gateway and sim.

A workload is held column-wise (numpy arrays) so that million-request traces stay fast;
`RequestSpec` is the per-request view the drivers iterate over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from burstguard.wire.prefix import BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as a workload describes it (times in seconds from the start)."""

    id: str
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    priority_class: str | None = None
    tenant: str | None = None
    prefix_hashes: tuple[int, ...] = ()
    failed: bool = False  # the trace recorded this request as failed (BurstGPT "Log Type")
    session: str | None = None  # the conversation or agent run it belongs to
    turn: int | None = None  # its turn in the session (an agent's step)
    after: tuple[str, ...] = ()  # ids it waits for: sent once all have answered...
    think_s: float = 0.0  # ...plus this think time, and not before `arrival_s`


@dataclass
class Workload:
    """A column-oriented set of requests, sorted by arrival time.

    `arrival_s`, `prompt_tokens`, `output_tokens` are required; labels are optional
    per-request object arrays (None where absent).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    priority_class: np.ndarray | None = None
    tenant: np.ndarray | None = None
    prefix_hashes: Sequence[tuple[int, ...]] | None = None
    failed: np.ndarray | None = None
    ids: np.ndarray | None = None
    source: str = ""
    meta: dict[str, object] = field(default_factory=dict)
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    after: Sequence[tuple[str, ...]] | None = None
    think_s: np.ndarray | None = None
    """Sessions (`workload.sessions`): a request with `after` is sent `think_s` after the
    last of those requests answered, and not before its `arrival_s` (a lower bound)."""

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def prefix_block_tokens(self) -> int:
        """Tokens per prefix block (`meta.block_tokens`): a Mooncake trace's hash_ids name
        512-token blocks; burstguard's own workloads use the engine's 16."""
        value = self.meta.get("block_tokens", BLOCK_TOKENS)
        return value if isinstance(value, int) and value > 0 else BLOCK_TOKENS

    def request_id(self, i: int) -> str:
        return str(self.ids[i]) if self.ids is not None else f"r{i}"

    def spec(self, i: int) -> RequestSpec:
        return _spec_at(self, self.request_id(i), i)

    def rows(self) -> WorkloadRows:
        """The workload to be read request by request, every one of them (a simulation)."""
        return WorkloadRows(self)

    def specs(self) -> Iterator[RequestSpec]:
        for i in range(len(self)):
            yield self.spec(i)

    @classmethod
    def from_specs(cls, specs: Sequence[RequestSpec], source: str = "") -> Workload:
        specs = sorted(specs, key=lambda s: s.arrival_s)
        has_class = any(s.priority_class is not None for s in specs)
        has_tenant = any(s.tenant is not None for s in specs)
        has_prefix = any(s.prefix_hashes for s in specs)
        has_session = any(s.session is not None or s.after for s in specs)
        return cls(
            arrival_s=np.array([s.arrival_s for s in specs], dtype=np.float64),
            prompt_tokens=np.array([s.prompt_tokens for s in specs], dtype=np.int64),
            output_tokens=np.array([s.max_tokens for s in specs], dtype=np.int64),
            priority_class=np.array([s.priority_class for s in specs], dtype=object)
            if has_class
            else None,
            tenant=np.array([s.tenant for s in specs], dtype=object) if has_tenant else None,
            prefix_hashes=[s.prefix_hashes for s in specs] if has_prefix else None,
            failed=np.array([s.failed for s in specs], dtype=bool),
            ids=np.array([s.id for s in specs], dtype=object),
            source=source,
            session=np.array([s.session for s in specs], dtype=object) if has_session else None,
            turn=np.array([s.turn or 0 for s in specs], dtype=np.int64) if has_session else None,
            after=[s.after for s in specs] if has_session else None,
            think_s=np.array([s.think_s for s in specs], dtype=np.float64) if has_session else None,
        )


class WorkloadRows:
    """A workload's columns as Python lists, read request by request: what a simulation
    does for each of a day's millions (`spec` from lists takes about half the time it takes
    from numpy scalars). A snapshot: made after the workload is complete."""

    def __init__(self, workload: Workload) -> None:
        def listed(column: Any) -> list[Any] | None:
            if column is None:
                return None
            return column.tolist() if isinstance(column, np.ndarray) else list(column)

        self.arrival_s: list[float] = workload.arrival_s.tolist()
        self.prompt_tokens: list[int] = workload.prompt_tokens.tolist()
        self.output_tokens: list[int] = workload.output_tokens.tolist()
        self.priority_class = listed(workload.priority_class)
        self.tenant = listed(workload.tenant)
        self.prefix_hashes = listed(workload.prefix_hashes)
        self.failed = listed(workload.failed)
        self.ids = None if workload.ids is None else [str(x) for x in workload.ids.tolist()]
        self.session = listed(workload.session)
        self.turn = listed(workload.turn)
        self.after = listed(workload.after)
        self.think_s = listed(workload.think_s)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def request_id(self, i: int) -> str:
        return self.ids[i] if self.ids is not None else f"r{i}"

    def spec(self, i: int) -> RequestSpec:
        return _spec_at(self, self.request_id(i), i)


def _spec_at(c: Workload | WorkloadRows, rid: str, i: int) -> RequestSpec:
    """Request `i` of the columns `c` (numpy arrays or lists, of the same names)."""
    return RequestSpec(
        rid,
        float(c.arrival_s[i]),
        int(c.prompt_tokens[i]),
        int(c.output_tokens[i]),
        None if c.priority_class is None else c.priority_class[i],
        None if c.tenant is None else c.tenant[i],
        () if c.prefix_hashes is None else tuple(c.prefix_hashes[i]),
        False if c.failed is None else bool(c.failed[i]),
        None if c.session is None else c.session[i],
        None if c.turn is None else int(c.turn[i]),
        () if c.after is None else tuple(c.after[i]),
        0.0 if c.think_s is None else float(c.think_s[i]),
    )


CLASS_PRIORITY = {"interactive": 0, "standard": 1, "batch": 2}


def priority_of(priority_class: str | None) -> int:
    """vLLM `priority` for a class name (lower runs first); unknown or none -> 1."""
    return CLASS_PRIORITY.get(priority_class or "", 1)
