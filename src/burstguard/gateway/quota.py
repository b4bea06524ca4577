"""Tenant quotas as token buckets: pure arithmetic and policy, no clock, no await.

A quota rule (`config.QuotaLimit`) gives a request bucket and a token bucket; a bucket
refills at `per_s` units per second of the core's clock up to `burst`. A request is
admitted when every bucket of its rule holds its cost (requests: 1; tokens: its prompt
plus the output it may produce: `max_tokens`, else `reserve_output_tokens`), and then
every bucket is debited at once; otherwise none is, and the answer is the wait until the
slowest bucket holds the cost (`Verdict.wait_s`), exact, so a client that waits exactly
that long is admitted (if nobody else of its bucket took the tokens meanwhile). A cost
above the burst can never be admitted (`wait_s` is infinite).

When the request ends it is settled to what it used (`settle`): prompt plus the output its
client received (completed, cancelled or failed alike), so the reserved output it did not
produce goes back to the bucket; one the gateway shed after admission (queue full,
deadline, evicted, no backend) is refunded whole. Output beyond the reservation (no
`max_tokens`, and a longer answer than reserved) is charged at the end: the bucket goes
below zero by at most that one request's excess, and later requests wait for it.

Invariant (tests/unit/test_gateway_quota.py, hypothesis): over any interval, what is
admitted less what is refunded is at most `burst + per_s x length` — refunds give back
only what a request was charged.

The shell may charge somewhere else (Redis, shared by gateway replicas: the same
arithmetic in a Lua script, `fleet.shared_state`) and hand the core the `Verdict`; a
`Plan` names the buckets and costs either way. The local buckets are bounded
(`max_buckets`): ones that refilled are dropped first (a full bucket is a fresh one),
then new bucket ids share the bucket `~overflow`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from burstguard.gateway.config import ApiKeyConfig, QuotaConfig, QuotaLimit
from burstguard.gateway.request import GatewayRequest

__all__ = [
    "Bucket",
    "BucketCharge",
    "Plan",
    "Quotas",
    "RateLimit",
    "Verdict",
    "key_id",
]

Kind = Literal["requests", "tokens"]
OVERFLOW_BUCKET = "~overflow"
_TOLERANCE = 1e-9  # relative: a client that waits exactly the computed time is admitted


def key_id(key: str) -> str:
    """The id of an API key in bucket names (Redis keys, logs): a hash, never the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class BucketCharge:
    """One bucket to charge for a request: its id, shape and the request's cost in it."""

    bucket: str
    kind: Kind
    per_s: float
    burst: float
    cost: float


@dataclass(frozen=True, slots=True)
class Plan:
    """What a request costs under its rule: one charge per limited bucket."""

    charges: tuple[BucketCharge, ...]
    prompt_tokens: int
    reserved_output: int


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One bucket after a request, as the x-ratelimit-* headers say it: its size, what is
    left (whole units), and the seconds (core clock) until it is full again."""

    limit: float
    remaining: float
    reset_s: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """Admitted (every bucket debited) or not (none debited; `wait_s`: until it would be,
    core clock; infinite: its cost exceeds a burst). `refused_by`: the bucket kind with
    the longest wait. `limits`: per kind, the bucket after this request. `shared`: charged
    in the shared store (its settlement goes there too)."""

    admitted: bool
    wait_s: float = 0.0
    refused_by: Kind | None = None
    limits: dict[Kind, RateLimit] = field(default_factory=dict)
    shared: bool = False


@dataclass(slots=True)
class Bucket:
    """A token bucket's state: `level` at time `at` (the level may be below zero after an
    overdraw, never above the burst)."""

    level: float
    at: float

    def refill(self, per_s: float, burst: float, now: float) -> None:
        """Brings the level to `now` (time never runs back: an earlier `now` is ignored)."""
        if now > self.at:
            self.level = min(burst, self.level + per_s * (now - self.at))
            self.at = now

    def wait_s(self, per_s: float, burst: float, cost: float) -> float:
        """Seconds until the (refilled) level holds `cost`: 0 now, inf never."""
        if cost > burst * (1 + _TOLERANCE):
            return math.inf
        short = cost - self.level
        if short <= _TOLERANCE * max(1.0, burst):
            return 0.0
        return short / per_s

    def full_in_s(self, per_s: float, burst: float) -> float:
        return max(0.0, burst - self.level) / per_s


def take(buckets: Sequence[Bucket], charges: Sequence[BucketCharge], now: float) -> Verdict:
    """Admits (debiting every bucket) when each holds its charge; else debits none."""
    wait, refused_by = 0.0, None
    for b, c in zip(buckets, charges, strict=True):
        b.refill(c.per_s, c.burst, now)
        w = b.wait_s(c.per_s, c.burst, c.cost)
        if w > wait:
            wait, refused_by = w, c.kind
    admitted = wait == 0.0
    limits: dict[Kind, RateLimit] = {}
    for b, c in zip(buckets, charges, strict=True):
        if admitted:
            b.level -= c.cost
        limits[c.kind] = RateLimit(c.burst, max(0.0, math.floor(b.level + 1e-9)),
                                   b.full_in_s(c.per_s, c.burst))  # fmt: skip
    return Verdict(admitted, wait, refused_by, limits)


def give(bucket: Bucket, charge: BucketCharge, amount: float, now: float) -> None:
    """Adds `amount` back (a refund) or, when negative, charges it (an overdraw)."""
    bucket.refill(charge.per_s, charge.burst, now)
    bucket.level = min(charge.burst, bucket.level + amount)


class Quotas:
    """The quota rules of one config and the core's local buckets."""

    def __init__(
        self, cfg: QuotaConfig, keys: Sequence[ApiKeyConfig], default_output_tokens: int
    ) -> None:
        self.cfg = cfg
        self._keys = {key_id(k.key): k.quota for k in keys if k.quota is not None}
        self._reserve = (
            cfg.reserve_output_tokens
            if cfg.reserve_output_tokens is not None
            else default_output_tokens
        )
        self._buckets: dict[str, Bucket] = {}
        self._shapes: dict[str, BucketCharge] = {}  # bucket -> its last shape (for sweeps)

    @property
    def enabled(self) -> bool:
        c = self.cfg
        return bool(self._keys or c.tenants or c.classes or c.default is not None)

    def rule(self, req: GatewayRequest) -> tuple[str, QuotaLimit] | None:
        """(bucket scope, rule) of `req`: its key's, its tenant's, its class's, the default."""
        tenant = req.tenant or ""
        if req.key_id is not None and (q := self._keys.get(req.key_id)) is not None:
            return f"k:{req.key_id}", q
        if (q := self.cfg.tenants.get(tenant)) is not None:
            return f"t:{tenant}", q
        cls = req.priority_class or ""
        if (q := self.cfg.classes.get(cls)) is not None:
            return f"c:{cls}:{tenant}", q
        if self.cfg.default is not None:
            return f"d:{tenant}", self.cfg.default
        return None

    def plan(self, req: GatewayRequest) -> Plan | None:
        """The buckets `req` is charged in and its costs; None: no rule limits it."""
        found = self.rule(req)
        if found is None:
            return None
        scope, q = found
        reserve = req.max_tokens if req.max_tokens is not None else self._reserve
        charges = []
        for kind, cost in (("requests", 1.0), ("tokens", float(req.prompt_tokens + reserve))):
            shape = q.rate(kind)  # type: ignore[arg-type]
            if shape is not None:
                per_s, burst = shape
                charges.append(BucketCharge(f"{scope}:{kind[0]}", kind, per_s, burst, cost))  # type: ignore[arg-type]
        return Plan(tuple(charges), req.prompt_tokens, reserve)

    # -- the local buckets ------------------------------------------------------------

    def take(self, plan: Plan, now: float, share: int = 1) -> Verdict:
        """Charges `plan` in the local buckets, each scaled to 1/`share` of its rate and
        burst (a replica's share while the shared store is unreachable)."""
        charges = [self._scaled(c, share) for c in plan.charges]
        return take([self._bucket(c, now) for c in charges], charges, now)

    def settle(self, plan: Plan, share: int, now: float, refund: dict[Kind, float]) -> None:
        """Gives `refund[kind]` back to the local buckets of `plan` (negative: charges)."""
        for c in plan.charges:
            amount = refund.get(c.kind, 0.0)
            if amount:
                s = self._scaled(c, share)
                give(self._bucket(s, now), s, amount / share, now)

    @staticmethod
    def _scaled(c: BucketCharge, share: int) -> BucketCharge:
        if share == 1:
            return c
        return BucketCharge(f"{c.bucket}/{share}", c.kind, c.per_s / share,
                            max(c.burst / share, c.cost), c.cost)  # fmt: skip

    def _bucket(self, c: BucketCharge, now: float) -> Bucket:
        b = self._buckets.get(c.bucket)
        if b is not None:
            return b
        if len(self._buckets) >= self.cfg.max_buckets:
            self._sweep(now)
        if len(self._buckets) >= self.cfg.max_buckets:
            name = f"{OVERFLOW_BUCKET}:{c.kind[0]}"
            b = self._buckets.get(name)
            if b is None:  # one bucket more than max_buckets, at most (one per kind)
                b = self._buckets[name] = Bucket(c.burst, now)
            return b
        b = self._buckets[c.bucket] = Bucket(c.burst, now)
        self._shapes[c.bucket] = c
        return b

    def _sweep(self, now: float) -> None:
        """Drops the buckets that refilled to full: a full bucket is a fresh one."""
        for name in [n for n in self._buckets if n in self._shapes]:
            c, b = self._shapes[name], self._buckets[name]
            b.refill(c.per_s, c.burst, now)
            if b.level >= c.burst:
                del self._buckets[name], self._shapes[name]

    @property
    def buckets(self) -> int:
        """Local buckets held now (bounded by `max_buckets` + the overflow ones)."""
        return len(self._buckets)


def settle_amounts(plan: Plan, output_tokens: int | None, ran: bool) -> dict[Kind, float]:
    """What goes back to each bucket when a request ends: everything when it never ran
    (the gateway shed it after admission); else its unused reserved output (negative:
    output beyond the reservation, charged now). `output_tokens` None: unknown (nothing
    goes back)."""
    if not ran:
        return {c.kind: c.cost for c in plan.charges}
    if output_tokens is None:
        return {}
    return {"tokens": float(plan.reserved_output - output_tokens)}
