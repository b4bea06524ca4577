"""Ordering policies: which queued request goes to the backend next.

Three orthogonal choices (config `policy`), each a trade-off:

- Between classes — `priority: true`: strict priority by class rank. Interactive never
  waits behind batch, at the price that batch can starve under sustained load; the aging
  bound `max_wait_s` caps that: a request that waited that long goes ahead of every class
  (oldest promotion deadline first), and its class's own in-flight cap no longer holds it
  back (only the total cap does). A class with a guaranteed share
  (`min_in_flight_fraction`) goes ahead of better classes while its own requests in flight
  are below that share of the request cap: under sustained overload it is served at a
  predictable rate instead of in the rare windows the better classes leave.
  `priority: false`: one shared order for all classes.
- Within a class — `order: fcfs` (arrival order: predictable, no starvation, but a burst
  of long jobs delays every short one behind it) or `order: spjf` (shortest predicted job
  first: minimises mean wait when predictions are right; long jobs wait longer). SPJF ages:
  each second waited counts as `spjf_aging_tokens_per_s` tokens shorter. Since every entry
  ages at the same rate, the key `predicted + aging * arrival` is time-invariant, so a heap
  holds the order; a job of P predicted tokens is overtaken only by jobs that arrived less
  than P/aging seconds after it, which bounds its wait.
- Between tenants of a class — `fairness: none` (one shared order: cheapest, a heavy
  tenant's burst delays everyone), `vtc` (virtual token counter, Sheng et al., OSDI '24:
  serve the backlogged tenant that has received the fewest tokens; a tenant returning from
  idle is lifted to the smallest counter among the backlogged, so idleness banks no credit;
  tokens are charged at dispatch with the prediction and corrected at finish) or `drr`
  (deficit round robin by tokens, Shreedhar & Varghese: each backlogged tenant earns a
  quantum of tokens per turn; O(1) state per tenant, shares exact over a round, but a
  tenant's share does not remember its past once it goes idle).

Tenants may come from a client's header, so their number is the client's to choose: the
state kept per tenant is bounded. VTC keeps a counter only for an *active* tenant (queued
at the last pick, or in flight); a tenant with neither is retired into a bounded LRU of
recently idle tenants (`limits.max_idle_tenants`) and forgotten past it. Forgetting is
safe under VTC's own rule: a returning tenant is lifted to the smallest active counter
anyway, so only an idle tenant whose counter is above that floor (served a lot just
before) loses anything, and the LRU keeps exactly the recently served ones. DRR keeps a
deficit only for queued tenants. The queue maps tenants past `limits.max_queued_tenants`
distinct per class to one shared bucket (`queue.OVERFLOW_TENANT`), so each pick, which
looks at every queued tenant, costs at most that many steps.

With gateway replicas sharing Redis, VTC counts a tenant's service over the whole fleet:
its own dispatches plus what the other replicas served it (`fleet_service`, learned at
each sync), so a tenant served heavily through one replica goes behind a light tenant at
another. DRR has no memory of the past, so it ignores the fleet's service.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from typing import Protocol

from burstguard.core.gateway.config import PolicyConfig
from burstguard.core.gateway.queue import ClassQueue, GatewayQueue
from burstguard.core.gateway.request import Entry

Allowed = Callable[[ClassQueue, bool], bool]
"""Whether a class may release now; the flag says its candidate is aged (past max_wait_s)."""


def order_key(policy: PolicyConfig, e: Entry) -> float:
    """Lower goes first within a tenant's queue (fcfs: arrival; spjf: aged predicted size)."""
    if policy.order == "fcfs":
        return e.req.arrival_s
    return e.predicted_output + policy.spjf_aging_tokens_per_s * e.req.arrival_s


class Fairness(Protocol):
    """Chooses the tenant within a class; told what was dispatched, what it really cost,
    when it left the backend, and what other gateway replicas served."""

    def pick(self, q: ClassQueue) -> Entry: ...

    def dispatched(self, tenant: str, tokens: int) -> None:
        """An entry of `tenant` went to the backend, charged `tokens` (its predicted cost)."""

    def settled(self, tenant: str) -> None:
        """An entry of `tenant` left the backend (finished, cancelled, failed, requeued)."""

    def charge(self, tenant: str, tokens: float) -> None:
        """A correction to what `tenant` was charged (actual minus predicted tokens)."""

    def fleet_service(self, tenant: str, tokens: float) -> None:
        """Other gateway replicas served `tenant` this many tokens since the last sync."""

    def tracked(self) -> list[str]:
        """The tenants it keeps state for (bounded), whose fleet service it wants."""
        ...

    def service(self, tenant: str) -> float | None:
        """The service `tenant` is charged with, as it orders by (None: not tracked)."""
        ...


class NoFairness:
    """One order across tenants: the best key among the tenants' heads."""

    def pick(self, q: ClassQueue) -> Entry:
        return min((q.head(t) for t in q.tenants()), key=lambda e: (e.key, e.seq))

    def dispatched(self, tenant: str, tokens: int) -> None:
        """Nothing to account."""

    def settled(self, tenant: str) -> None:
        """Nothing to account."""

    def charge(self, tenant: str, tokens: float) -> None:
        """Nothing to account."""

    def fleet_service(self, tenant: str, tokens: float) -> None:
        """Nothing to account."""

    def tracked(self) -> list[str]:
        return []

    def service(self, tenant: str) -> float | None:
        return None


class VirtualTokenCounter:
    """Serve the backlogged tenant with the smallest served-token counter.

    Counters live for active tenants (queued at the last pick, or in flight) and, once
    idle, in an LRU of at most `max_idle` tenants; a tenant forgotten past it comes back
    at the floor, as a new one would."""

    def __init__(self, max_idle: int) -> None:
        self._counter: dict[str, float] = {}  # active tenants
        self._in_flight = Counter[str]()
        self._backlogged: set[str] = set()  # queued at the last pick
        self._idle: OrderedDict[str, float] = OrderedDict()  # recently idle, oldest first
        self._max_idle = max_idle
        self._high = 0.0  # the highest counter reached: the floor while nobody is backlogged

    def pick(self, q: ClassQueue) -> Entry:
        tenants = list(q.tenants())
        queued = set(tenants)
        for t in self._backlogged - queued:  # left the queue since the last pick
            if not self._in_flight[t]:
                self._retire(t)
        fresh = [t for t in tenants if t not in self._backlogged]
        if fresh:
            active = [self._counter[t] for t in tenants if t in self._backlogged]
            floor = min(active) if active else self._high
            for t in fresh:
                self._counter[t] = max(self._revive(t), floor)
        self._backlogged = queued
        best = min(tenants, key=self._counter.__getitem__)
        return q.head(best)

    def _revive(self, tenant: str) -> float:
        """The tenant's counter if it has one (active, or recently idle), else 0."""
        c = self._counter.get(tenant)
        return c if c is not None else self._idle.pop(tenant, 0.0)

    def _retire(self, tenant: str) -> None:
        """Neither queued nor in flight: into the idle LRU (the oldest idle leaves)."""
        c = self._counter.pop(tenant, None)
        if c is None or not self._max_idle:
            return
        self._idle[tenant] = c
        if len(self._idle) > self._max_idle:
            self._idle.popitem(last=False)

    def dispatched(self, tenant: str, tokens: int) -> None:
        # an aged entry is released without a pick: its tenant may have no counter yet
        c = self._counter[tenant] = self._revive(tenant) + tokens
        self._high = max(self._high, c)
        self._in_flight[tenant] += 1

    def settled(self, tenant: str) -> None:
        left = self._in_flight[tenant] - 1
        if left > 0:
            self._in_flight[tenant] = left
            return
        self._in_flight.pop(tenant, None)
        if tenant not in self._backlogged:
            self._retire(tenant)

    def charge(self, tenant: str, tokens: float) -> None:
        """Adds to a tracked tenant's counter; an untracked one comes back at the floor."""
        if tenant in self._counter:
            c = self._counter[tenant] = self._counter[tenant] + tokens
        elif tenant in self._idle:
            c = self._idle[tenant] = self._idle[tenant] + tokens
        else:
            return
        self._high = max(self._high, c)

    def fleet_service(self, tenant: str, tokens: float) -> None:
        """What other replicas served a tenant counts as if served here."""
        self.charge(tenant, tokens)

    def tracked(self) -> list[str]:
        return [*self._counter, *self._idle]

    def service(self, tenant: str) -> float | None:
        return self._counter.get(tenant, self._idle.get(tenant))


class DeficitRoundRobin:
    """Round robin over backlogged tenants; each turn adds a token quantum to the deficit."""

    def __init__(self, quantum: int) -> None:
        self._quantum = quantum
        self._deficit: dict[str, float] = {}
        self._turn: str | None = None

    def pick(self, q: ClassQueue) -> Entry:
        tenants = list(q.tenants())
        queued = set(tenants)
        for t in [t for t in self._deficit if t not in queued]:
            del self._deficit[t]  # an idle tenant keeps no deficit
        if self._turn not in queued:
            self._turn = None
        while True:
            order = self._rotation(tenants)
            for t in order:
                head = q.head(t)
                if head.cost <= self._deficit.get(t, 0.0):
                    self._turn = t
                    return head
            # Nobody can afford its head: grant whole rounds at once (no spinning).
            need = min(q.head(t).cost - self._deficit.get(t, 0.0) for t in tenants)
            rounds = max(1, -(-int(need) // self._quantum))
            for t in tenants:
                self._deficit[t] = self._deficit.get(t, 0.0) + rounds * self._quantum
            self._turn = None

    def _rotation(self, tenants: list[str]) -> list[str]:
        if self._turn is None:
            return tenants
        i = tenants.index(self._turn)
        return tenants[i:] + tenants[:i]

    def dispatched(self, tenant: str, tokens: int) -> None:
        self.charge(tenant, tokens)

    def settled(self, tenant: str) -> None:
        """A deficit is kept while queued, whatever is in flight."""

    def charge(self, tenant: str, tokens: float) -> None:
        if tenant in self._deficit:
            self._deficit[tenant] -= tokens

    def fleet_service(self, tenant: str, tokens: float) -> None:
        """No memory of the past: what others served does not enter a round."""

    def tracked(self) -> list[str]:
        return []

    def service(self, tenant: str) -> float | None:
        """Its deficit orders it, not its service."""
        return None


def make_fairness(policy: PolicyConfig, max_idle: int) -> Fairness:
    if policy.fairness == "vtc":
        return VirtualTokenCounter(max_idle)
    if policy.fairness == "drr":
        return DeficitRoundRobin(policy.drr_quantum_tokens)
    return NoFairness()


class Picker:
    """Strict priority with aging over classes, then fairness and order within a class."""

    def __init__(self, policy: PolicyConfig, queue: GatewayQueue, max_idle_tenants: int) -> None:
        self._policy = policy
        self._queue = queue
        # Fairness is within a class, so each class keeps its own accounting.
        self._fair: dict[str, Fairness] = {
            q.cls.name: make_fairness(policy, max_idle_tenants) for q in queue.classes
        }

    def fairness(self, class_name: str) -> Fairness:
        return self._fair[class_name]

    def fleet_service(self, served: Mapping[str, Mapping[str, float]]) -> None:
        """What other gateway replicas served, per class and tenant, since the last sync."""
        for cls, tenants in served.items():
            fair = self._fair.get(cls)
            if fair is not None:
                for tenant, tokens in tenants.items():
                    fair.fleet_service(tenant, tokens)

    def tracked(self) -> dict[str, list[str]]:
        """Per class, the tenants fairness keeps state for (what a sync should read)."""
        return {name: fair.tracked() for name, fair in self._fair.items()}

    def next(
        self, now: float, allowed: Allowed, below_share: Callable[[ClassQueue], bool] | None = None
    ) -> Entry | None:
        """The entry to dispatch next among classes that `allowed` admits, or None: the
        most overdue aged entry, else the best class `below_share` (under its guaranteed
        share of the slots), else by class priority (or one shared order)."""
        aged = self._aged(now, allowed)
        if aged is not None:
            return aged
        if below_share is not None:
            for q in self._queue.classes:
                if q.count and below_share(q) and allowed(q, False):
                    return self._fair[q.cls.name].pick(q)
        if self._policy.priority:
            for q in self._queue.classes:
                if q.count and allowed(q, False):
                    return self._fair[q.cls.name].pick(q)
            return None
        return self._pick_shared(allowed)

    def _aged(self, now: float, allowed: Allowed) -> Entry | None:
        """The queued entry most overdue past its class's aging bound, if any."""
        best: Entry | None = None
        best_due = 0.0
        for q in self._queue.classes:
            bound = q.cls.max_wait_s
            if bound is None or not q.count or not allowed(q, True):
                continue
            e = q.oldest()
            assert e is not None
            due = e.req.arrival_s + bound
            if due <= now and (best is None or due < best_due):
                best, best_due = e, due
        return best

    def _pick_shared(self, allowed: Allowed) -> Entry | None:
        """No class priority: each allowed class proposes, the best key wins."""
        best: Entry | None = None
        for q in self._queue.classes:
            if q.count and allowed(q, False):
                e = self._fair[q.cls.name].pick(q)
                if best is None or (e.key, e.seq) < (best.key, best.seq):
                    best = e
        return best
