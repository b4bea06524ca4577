"""The waiting queue, in the two orders vLLM offers: FCFS and priority.

FCFS is a deque: new requests join the back, preempted ones return to the front (they
were admitted earliest). Priority is a heap on (priority, arrival, admission order), so a
preempted request re-enters at its own rank.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from burstguard.core.engine.request import EngineRequest


class RequestQueue(Protocol):
    def add(self, req: EngineRequest) -> None: ...
    def prepend(self, req: EngineRequest) -> None: ...
    def peek(self) -> EngineRequest: ...
    def pop(self) -> EngineRequest: ...
    def remove(self, req: EngineRequest) -> None: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> Iterator[EngineRequest]: ...


class FcfsQueue:
    """First come, first served; preempted requests go back to the head."""

    def __init__(self) -> None:
        self._q: deque[EngineRequest] = deque()

    def add(self, req: EngineRequest) -> None:
        self._q.append(req)

    def prepend(self, req: EngineRequest) -> None:
        self._q.appendleft(req)

    def peek(self) -> EngineRequest:
        return self._q[0]

    def pop(self) -> EngineRequest:
        return self._q.popleft()

    def remove(self, req: EngineRequest) -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[EngineRequest]:
        return iter(self._q)


class PriorityQueue:
    """Lowest `priority` value first, ties by arrival time, then admission order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, EngineRequest]] = []

    def add(self, req: EngineRequest) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival_s, req.seq, req))

    def prepend(self, req: EngineRequest) -> None:
        """A preempted request re-enters at its own rank."""
        self.add(req)

    def peek(self) -> EngineRequest:
        return self._heap[0][3]

    def pop(self) -> EngineRequest:
        return heapq.heappop(self._heap)[3]

    def remove(self, req: EngineRequest) -> None:
        self._heap = [e for e in self._heap if e[3] is not req]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[EngineRequest]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]))


def create_queue(policy: str) -> FcfsQueue | PriorityQueue:
    return PriorityQueue() if policy == "priority" else FcfsQueue()
