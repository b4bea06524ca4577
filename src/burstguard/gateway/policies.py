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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from burstguard.gateway.config import PolicyConfig
from burstguard.gateway.queue import ClassQueue, GatewayQueue
from burstguard.gateway.request import Entry

Allowed = Callable[[ClassQueue, bool], bool]
"""Whether a class may release now; the flag says its candidate is aged (past max_wait_s)."""


def order_key(policy: PolicyConfig, e: Entry) -> float:
    """Lower goes first within a tenant's queue (fcfs: arrival; spjf: aged predicted size)."""
    if policy.order == "fcfs":
        return e.req.arrival_s
    return e.predicted_output + policy.spjf_aging_tokens_per_s * e.req.arrival_s


class Fairness(Protocol):
    """Chooses the tenant within a class; told what was dispatched and what it really cost."""

    def pick(self, q: ClassQueue) -> Entry: ...

    def charge(self, tenant: str, tokens: int) -> None: ...


class NoFairness:
    """One order across tenants: the best key among the tenants' heads."""

    def pick(self, q: ClassQueue) -> Entry:
        return min((q.head(t) for t in q.tenants()), key=lambda e: (e.key, e.seq))

    def charge(self, tenant: str, tokens: int) -> None:
        """Nothing to account."""


class VirtualTokenCounter:
    """Serve the backlogged tenant with the smallest served-token counter."""

    def __init__(self) -> None:
        self._counter: dict[str, float] = {}
        self._backlogged: set[str] = set()

    def pick(self, q: ClassQueue) -> Entry:
        tenants = list(q.tenants())
        fresh = [t for t in tenants if t not in self._backlogged]
        if fresh:
            active = [self._counter.get(t, 0.0) for t in tenants if t in self._backlogged]
            floor = min(active) if active else max(self._counter.values(), default=0.0)
            for t in fresh:
                self._counter[t] = max(self._counter.get(t, 0.0), floor)
        self._backlogged = set(tenants)
        best = min(tenants, key=lambda t: self._counter[t])
        return q.head(best)

    def charge(self, tenant: str, tokens: int) -> None:
        self._counter[tenant] = self._counter.get(tenant, 0.0) + tokens


class DeficitRoundRobin:
    """Round robin over backlogged tenants; each turn adds a token quantum to the deficit."""

    def __init__(self, quantum: int) -> None:
        self._quantum = quantum
        self._deficit: dict[str, float] = {}
        self._turn: str | None = None

    def pick(self, q: ClassQueue) -> Entry:
        tenants = list(q.tenants())
        for t in list(self._deficit):
            if t not in tenants:
                del self._deficit[t]  # an idle tenant keeps no deficit
        if self._turn not in tenants:
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

    def charge(self, tenant: str, tokens: int) -> None:
        if tenant in self._deficit:
            self._deficit[tenant] -= tokens


def make_fairness(policy: PolicyConfig) -> Fairness:
    if policy.fairness == "vtc":
        return VirtualTokenCounter()
    if policy.fairness == "drr":
        return DeficitRoundRobin(policy.drr_quantum_tokens)
    return NoFairness()


class Picker:
    """Strict priority with aging over classes, then fairness and order within a class."""

    def __init__(self, policy: PolicyConfig, queue: GatewayQueue) -> None:
        self._policy = policy
        self._queue = queue
        # Fairness is within a class, so each class keeps its own accounting.
        self._fair: dict[str, Fairness] = {q.cls.name: make_fairness(policy) for q in queue.classes}

    def fairness(self, class_name: str) -> Fairness:
        return self._fair[class_name]

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
