"""The request spec: the contract between workload, bench, engine, gateway and sim.

A workload is held column-wise (numpy arrays) so that million-request traces stay fast;
`RequestSpec` is the per-request view the drivers iterate over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

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
        return RequestSpec(
            id=self.request_id(i),
            arrival_s=float(self.arrival_s[i]),
            prompt_tokens=int(self.prompt_tokens[i]),
            max_tokens=int(self.output_tokens[i]),
            priority_class=None if self.priority_class is None else self.priority_class[i],
            tenant=None if self.tenant is None else self.tenant[i],
            prefix_hashes=() if self.prefix_hashes is None else tuple(self.prefix_hashes[i]),
            failed=False if self.failed is None else bool(self.failed[i]),
            session=None if self.session is None else self.session[i],
            turn=None if self.turn is None else int(self.turn[i]),
            after=() if self.after is None else tuple(self.after[i]),
            think_s=0.0 if self.think_s is None else float(self.think_s[i]),
        )

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


CLASS_PRIORITY = {"interactive": 0, "standard": 1, "batch": 2}


def priority_of(priority_class: str | None) -> int:
    """vLLM `priority` for a class name (lower runs first); unknown or none -> 1."""
    return CLASS_PRIORITY.get(priority_class or "", 1)
