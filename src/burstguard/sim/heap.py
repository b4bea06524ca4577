"""The simulator's clock: a heap of timestamped events, each handled by an entity.

As in Vidur (microsoft/vidur), the simulator is entities (clients, the gateway, an engine
replica) and events; an entity's handler runs at its event's time and may schedule more.
Adding a replica or an autoscaler adds entities and event kinds, not a new loop. Ties at
one instant go by `order` (lower first), then by when they were scheduled, so a run is
deterministic.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from collections.abc import Callable

Handler = Callable[[float], None]
PROGRESS_EVERY = 16  # events between progress calls (one event may handle every replica)


class EventHeap:
    """`at(time, order, handler)` schedules; `run()` pops in time order until empty."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Handler]] = []
        self._seq = itertools.count()
        self.now = 0.0

    def at(self, time: float, order: int, handler: Handler) -> None:
        if time < self.now:
            raise ValueError(f"event at {time} scheduled in the past (now {self.now})")
        heapq.heappush(self._heap, (time, order, next(self._seq), handler))

    def run(self, progress: Callable[[float], None] | None = None) -> float:
        """Handles every event in order; the time of the last one. `progress(now)` is
        called every PROGRESS_EVERY events (a long run's status line).

        The cyclic GC is off meanwhile (on again after, if it was): a long run keeps millions
        of records, their token gaps and the engine's requests alive, which its
        collections scan again and again (a day: ~7% of the CPU at a young threshold of
        100k, more at the default 700), while the events make almost no cyclic garbage
        (the first 3 h of the day: ~2,500 objects). What the run leaves alive is
        long-lived by construction: it goes straight to the oldest generation
        (`_to_oldest_generation`) instead of being walked by the young collections that
        would follow (a day: ~9% of the simulation's time)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._run(progress)
        finally:
            if enabled:
                _to_oldest_generation()
                gc.enable()
        return self.now

    def _run(self, progress: Callable[[float], None] | None) -> None:
        if progress is None:
            while self._heap:
                time, _, _, handler = heapq.heappop(self._heap)
                self.now = time
                handler(time)
            return
        left = PROGRESS_EVERY
        while self._heap:
            time, _, _, handler = heapq.heappop(self._heap)
            self.now = time
            handler(time)
            left -= 1
            if not left:
                left = PROGRESS_EVERY
                progress(time)

    def next_time(self) -> float:
        """When the next event is due (inf: none is)."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap)


def _to_oldest_generation() -> None:
    """Moves every object the collector tracks into its oldest generation without scanning
    them (`gc.freeze` then `gc.unfreeze` relink the generations' lists); the next full
    collection sees them, as it would have. Skipped when the process froze objects itself
    (a pre-fork server's `gc.freeze()`), which `unfreeze` would undo."""
    if gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()
