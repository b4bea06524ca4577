"""The gateway's queue: per class, per tenant, bounded in requests and tokens.

Storage only — which entry goes next is the policies' business. Each class keeps its
entries twice: in arrival order (a deque: oldest for aging and deadlines, newest for
eviction) and in one heap per tenant keyed by the ordering key (fcfs or spjf). Removal
from the middle (cancel, evict, expire) is lazy: the entry is marked dead and skipped when
it surfaces, so every operation stays O(log n) amortised.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from burstguard.core.gateway.config import ClassConfig
from burstguard.core.gateway.request import Entry

EXPIRY_FACTOR = 2.0
"""A queued request is shed once it has waited this many times its class's queue deadline.
Admission already refused whoever was expected to miss the deadline; this is the backstop
for an estimate gone wrong (the backend slowed down). Expiring at the deadline itself
would turn the ordinary spread of waits around an estimate into late 429s for clients
that have already waited — measured under a 3x overload: 16% of accepted interactive
requests — while serving them a little late costs the same capacity as anyone else."""

OVERFLOW_TENANT = "~overflow"
"""The one tenant that every tenant past `limits.max_queued_tenants` of a class queues
as: a client that sends a new tenant id per request shares one fair share, and the
policies' per-pick work stays bounded."""


class ClassQueue:
    """The queued entries of one priority class."""

    def __init__(self, cls: ClassConfig) -> None:
        self.cls = cls
        self._by_arrival: deque[Entry] = deque()
        self._heaps: dict[str, list[tuple[float, int, Entry]]] = {}
        self._per_tenant: dict[str, int] = {}
        self.count = 0
        self.tokens = 0

    def push(self, e: Entry) -> None:
        """Adds `e` in arrival order (a preempted entry goes back to where it arrived)."""
        q = self._by_arrival
        if q and q[-1].req.arrival_s > e.req.arrival_s:
            i = next(i for i, x in enumerate(q) if x.req.arrival_s > e.req.arrival_s)
            q.insert(i, e)
        else:
            q.append(e)
        heapq.heappush(self._heaps.setdefault(e.tenant, []), (e.key, e.seq, e))
        self._per_tenant[e.tenant] = self._per_tenant.get(e.tenant, 0) + 1
        self.count += 1
        self.tokens += e.cost

    def remove(self, e: Entry) -> None:
        """Takes `e` out (it must be alive and in this queue)."""
        e.alive = False
        self.count -= 1
        self.tokens -= e.cost
        left = self._per_tenant[e.tenant] - 1
        if left:
            self._per_tenant[e.tenant] = left
        else:
            del self._per_tenant[e.tenant]
            del self._heaps[e.tenant]
        self._trim()

    def _trim(self) -> None:
        q = self._by_arrival
        while q and not q[0].alive:
            q.popleft()
        while q and not q[-1].alive:
            q.pop()

    def tenant_for(self, tenant: str, max_tenants: int) -> str:
        """The tenant a new entry of `tenant` queues as: itself while it is queued already
        or fewer than `max_tenants` tenants are, else `OVERFLOW_TENANT`."""
        if tenant in self._per_tenant or len(self._per_tenant) < max_tenants:
            return tenant
        return OVERFLOW_TENANT

    def tenants(self) -> Iterator[str]:
        """Tenants with queued entries, in the order they first queued."""
        return iter(self._per_tenant)

    def head(self, tenant: str) -> Entry:
        """The tenant's next entry by ordering key."""
        h = self._heaps[tenant]
        while not h[0][2].alive:
            heapq.heappop(h)
        return h[0][2]

    def oldest(self) -> Entry | None:
        return self._by_arrival[0] if self._by_arrival else None

    def newest_first(self) -> Iterator[Entry]:
        """Entries that may be shed (not those whose client holds part of the answer),
        newest first."""
        return (e for e in reversed(self._by_arrival) if e.alive and not e.holds_answer)

    def older_than(self, arrival_s: float) -> list[Entry]:
        """Alive entries that arrived before `arrival_s`, oldest first."""
        out: list[Entry] = []
        for e in self._by_arrival:
            if e.req.arrival_s >= arrival_s:
                break
            if e.alive:
                out.append(e)
        return out


class GatewayQueue:
    """All classes' queues with their totals; classes sorted by rank (best first)."""

    def __init__(self, classes: tuple[ClassConfig, ...]) -> None:
        ordered = sorted(classes, key=lambda c: c.rank)
        self.classes: list[ClassQueue] = [ClassQueue(c) for c in ordered]
        self._by_name = {q.cls.name: q for q in self.classes}
        self.count = 0
        self.tokens = 0

    def of(self, name: str) -> ClassQueue:
        return self._by_name[name]

    def push(self, e: Entry) -> None:
        self._by_name[e.cls.name].push(e)
        self.count += 1
        self.tokens += e.cost

    def remove(self, e: Entry) -> None:
        self._by_name[e.cls.name].remove(e)
        self.count -= 1
        self.tokens -= e.cost

    def tokens_ahead(self, rank: int, strict: bool) -> tuple[int, int]:
        """(requests, tokens) that would go before a new arrival of class `rank`."""
        if not strict:
            return self.count, self.tokens
        n = t = 0
        for q in self.classes:
            if q.cls.rank > rank:
                break
            n += q.count
            t += q.tokens
        return n, t

    def expired(self, now: float) -> list[Entry]:
        """Entries that waited past EXPIRY_FACTOR x their class's queue deadline, removed,
        oldest first (not those whose client holds part of the answer: `holds_answer`)."""
        out: list[Entry] = []
        for q in self.classes:
            deadline = q.cls.queue_deadline_s
            if deadline is None:
                continue
            for e in q.older_than(now - EXPIRY_FACTOR * deadline):
                if not e.holds_answer:
                    self.remove(e)
                    out.append(e)
        out.sort(key=lambda e: e.req.arrival_s)
        return out
