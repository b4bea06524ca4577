"""A request inside the engine: what the client asked for plus the scheduler's state."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(slots=True, eq=False, init=False)  # (init=False: see perf_model.BatchShape)
class EngineRequest:
    """A generation request. `priority`: lower runs first (vLLM's meaning).
    `prefix_hashes`: hashes of the prompt's full `block_size`-token blocks, for prefix
    caching (block i covers tokens [i*block_size, (i+1)*block_size))."""

    id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    priority: int = 0
    prefix_hashes: tuple[int, ...] = ()
    # scheduler state (vLLM: Request.num_computed_tokens, output_token_ids, status)
    status: RequestStatus = field(default=RequestStatus.WAITING, init=False)
    num_computed_tokens: int = field(default=0, init=False)
    num_output_tokens: int = field(default=0, init=False)
    num_blocks: int = field(default=0, init=False)
    num_preemptions: int = field(default=0, init=False)
    first_scheduled_s: float | None = field(default=None, init=False)
    seq: int = field(default=0, init=False)  # admission order, the tie-break after arrival

    def __init__(
        self,
        id: str,
        prompt_tokens: int,
        max_tokens: int,
        arrival_s: float,
        priority: int = 0,
        prefix_hashes: tuple[int, ...] = (),
    ) -> None:
        self.id = id
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.arrival_s = arrival_s
        self.priority = priority
        self.prefix_hashes = prefix_hashes
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.num_blocks = 0
        self.num_preemptions = 0
        self.first_scheduled_s = None
        self.seq = 0

    @property
    def num_tokens(self) -> int:
        """Prompt plus the tokens generated so far: what a recompute must prefill."""
        return self.prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.ABORTED)
