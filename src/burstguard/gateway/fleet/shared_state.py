"""State shared by gateway replicas through Redis: per-backend in-flight leases, tenant
usage counters, and the fleet's aggregate queue depth and arrival rate.

Each gateway replica keeps its own queue (a distributed queue would put a Redis round trip
in every ordering decision); what must hold across replicas is the *caps*:

- **Leases.** Before a request goes to a backend the gateway acquires a lease on it: one
  atomic Lua script drops the expired leases of that backend's sorted set (score = expiry
  in Redis' own clock, so gateways' clocks never disagree) and adds one if fewer than the
  cap are held. N gateways together never hold more than the cap while Redis is up. A
  lease carries a TTL (`lease_ttl_s`); `sync` renews this gateway's live leases every
  `sync_interval_s`, so a gateway that dies loses its slots within the TTL.
- **Degraded mode.** When Redis does not answer (connection refused, timeout), the gateway
  keeps serving on a local cap, `local_cap(cap, replicas)` = the shared cap divided by the
  configured replica count (at least 1), raises `degraded`, and retries Redis every
  `rejoin_interval_s`. On rejoin it re-registers its live leases (even above the cap: they
  are running) and drops those it released meanwhile, so a restarted, empty Redis is
  rebuilt from the gateways.
- **Bound.** Total leases on a backend <= cap, except (a) while some gateways are degraded
  and others are not: + the degraded ones' local caps (<= the cap when all are degraded);
  (b) a gateway that cannot renew for longer than the TTL while its requests still run.
- **Tenant usage** (`charge_tenant`: tokens per class and tenant) is buffered and, at each
  `sync`, added to the hash of the current window of Redis' clock (`tenant_window_s`), in
  one script that also reads the totals of the tenants this gateway's fairness tracks. The
  increase of a total since this gateway's last read, less its own part, is what the other
  replicas served (`SyncResult.fleet_service`, for VTC): no round trip per request, and
  no replica ever sums every tenant. Bounded: a window's hash holds at most `max_tenants`
  tenants per class (the rest are charged to `~overflow`) and expires two windows after
  its last write; a tenant's first read is only a baseline, and a window boundary is
  bridged by reading the previous window too.
- **Quotas** (`charge_quota`, `settle_quota_soon`): a tenant's token buckets live in
  Redis, one hash per bucket (level, time of Redis' clock), charged by one Lua script per
  request that refills every bucket of its rule, admits only when each holds its cost and
  then debits all (the arithmetic of `gateway.quota`), so N replicas enforce one quota. A
  bucket's key expires when it would be full again (absent = full). Redis unreachable:
  `charge_quota` answers None and the core charges its own buckets at quota/N (N =
  `replicas`); settlements of requests charged in Redis are then dropped (the tenant is
  charged its reservation: never less than it used).
- **Aggregates** (`sync`): each gateway publishes its queue depth and arrival rate under a
  key with a TTL; the sum over live gateways is what an autoscaler scales on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from burstguard.errors import TargetError
from burstguard.gateway.fleet.config import RedisConfig
from burstguard.gateway.queue import OVERFLOW_TENANT
from burstguard.gateway.quota import BucketCharge, Kind, Plan, RateLimit, Verdict

log = logging.getLogger("burstguard.gateway.fleet")

REDIS_FIELD = "fleet.redis.url"

_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

# KEYS[1] lease set; ARGV lease id, cap, ttl ms -> 1 acquired, 0 full
_ACQUIRE = (
    _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ttl = tonumber(ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
return 0
"""
)

# KEYS lease sets; ARGV ttl ms, then per key: n, n lease ids -> per key the live count
_RENEW = (
    _NOW_MS
    + """
local ttl = tonumber(ARGV[1])
local pos = 2
local counts = {}
for i, key in ipairs(KEYS) do
  local n = tonumber(ARGV[pos])
  pos = pos + 1
  for j = 1, n do
    redis.call('ZADD', key, now + ttl, ARGV[pos])
    pos = pos + 1
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if n > 0 then redis.call('PEXPIRE', key, ttl) end
  counts[i] = redis.call('ZCARD', key)
end
return counts
"""
)

# KEYS[1] gateway set, KEYS[2] own key; ARGV id, depth, rate, ttl ms, key prefix of gateways
# -> {live gateways, summed depth, summed rate} (numbers as strings: Lua would truncate)
_PUBLISH = """
redis.call('HSET', KEYS[2], 'queue_depth', ARGV[2], 'arrival_rate', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('SADD', KEYS[1], ARGV[1])
local depth, rate, n = 0, 0, 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local v = redis.call('HMGET', ARGV[5] .. id, 'queue_depth', 'arrival_rate')
  if v[1] then
    depth = depth + tonumber(v[1])
    rate = rate + tonumber(v[2])
    n = n + 1
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return {n, tostring(depth), tostring(rate)}
"""

# ARGV key prefix, window ms, max tenants per hash, overflow tenant; then per class: class,
# n, n x (tenant, tokens), m, m x tenant -> {window, per read tenant: total now, total in
# the previous window} (numbers as strings: Lua would truncate)
_TENANTS = (
    _NOW_MS
    + """
local span = tonumber(ARGV[2])
local w = math.floor(now / span)
local most = tonumber(ARGV[3])
local out = {tostring(w)}
local pos = 5
while pos <= #ARGV do
  local cur = ARGV[1] .. ARGV[pos] .. ':' .. w
  local prev = ARGV[1] .. ARGV[pos] .. ':' .. (w - 1)
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2
  for i = 1, n do
    local f = ARGV[pos]
    if redis.call('HLEN', cur) >= most and redis.call('HEXISTS', cur, f) == 0 then f = ARGV[4] end
    redis.call('HINCRBYFLOAT', cur, f, ARGV[pos + 1])
    pos = pos + 2
  end
  if n > 0 then redis.call('PEXPIRE', cur, 2 * span) end
  local m = tonumber(ARGV[pos])
  pos = pos + 1
  for i = 1, m do
    out[#out + 1] = redis.call('HGET', cur, ARGV[pos]) or '0'
    out[#out + 1] = redis.call('HGET', prev, ARGV[pos]) or '0'
    pos = pos + 1
  end
end
return out
"""
)

# KEYS buckets; ARGV per key: refill per ms, burst, cost -> {admitted 0/1, wait ms (-1:
# never), index of the slowest bucket, per key its level after} (numbers as strings)
_QUOTA_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local levels, wait, worst = {}, 0, 0
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local v = redis.call('HMGET', KEYS[i], 'l', 't')
  local level = burst
  if v[1] then
    level = tonumber(v[1])
    local at = tonumber(v[2])
    if now > at then level = math.min(burst, level + rate * (now - at)) end
  end
  levels[i] = level
  local w = 0
  if cost > burst * (1 + 1e-9) then
    w = -1
  elseif cost - level > 1e-9 * math.max(1, burst) then
    w = (cost - level) / rate
  end
  if wait >= 0 and (w < 0 or w > wait) then wait, worst = w, i end
end
local ok = 0
if wait == 0 then
  ok = 1
  for i = 1, #KEYS do
    local rate, burst = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
    levels[i] = levels[i] - tonumber(ARGV[3 * i])
    redis.call('HSET', KEYS[i], 'l', tostring(levels[i]), 't', tostring(now))
    redis.call('PEXPIRE', KEYS[i], math.ceil((burst - levels[i]) / rate) + 1000)
  end
end
local out = {ok, tostring(wait), worst}
for i = 1, #KEYS do out[#out + 1] = tostring(levels[i]) end
return out
"""

# KEYS buckets; ARGV per key: refill per ms, burst, amount (given back; negative: charged)
_QUOTA_GIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1])
  local v = redis.call('HMGET', KEYS[i], 'l', 't')
  local level = burst
  if v[1] then
    level = tonumber(v[1])
    local at = tonumber(v[2])
    if now > at then level = math.min(burst, level + rate * (now - at)) end
  end
  level = math.min(burst, level + tonumber(ARGV[3 * i]))
  redis.call('HSET', KEYS[i], 'l', tostring(level), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[i], math.ceil((burst - level) / rate) + 1000)
end
return 1
"""

_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def local_cap(shared_cap: int, replicas: int) -> int:
    """A degraded gateway's share of a backend's cap: cap // replicas, at least 1."""
    return max(1, shared_cap // replicas)


def default_gateway_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class FleetAggregate:
    """What all live gateway replicas report together (for autoscaling)."""

    gateways: int
    queue_depth: float
    arrival_rate: float


@dataclass(frozen=True, slots=True)
class SyncResult:
    """One `sync`: shared lease counts per backend, fleet aggregates (None while degraded),
    and what the other replicas served the tenants asked about since the last sync (tokens
    per class and tenant; only those served more than nothing)."""

    degraded: bool
    leases: dict[str, int] = field(default_factory=dict)
    aggregate: FleetAggregate | None = None
    fleet_service: dict[str, dict[str, float]] = field(default_factory=dict)


class SharedState:
    """One gateway replica's connection to the shared state (or its degraded stand-in)."""

    def __init__(
        self,
        cfg: RedisConfig,
        gateway_id: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cfg.url is None:
            raise ValueError("SharedState needs fleet.redis.url")
        self.cfg = cfg
        self.gateway_id = gateway_id or default_gateway_id()
        self._clock = clock
        self._redis = aioredis.Redis.from_url(
            cfg.url,
            socket_timeout=cfg.timeout_s,
            socket_connect_timeout=cfg.timeout_s,
            retry=Retry(NoBackoff(), 0),  # no hidden retries: degrade at once, rejoin later
            decode_responses=True,
        )
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._renew = self._redis.register_script(_RENEW)
        self._publish = self._redis.register_script(_PUBLISH)
        self._tenants = self._redis.register_script(_TENANTS)
        self._quota_take = self._redis.register_script(_QUOTA_TAKE)
        self._quota_give = self._redis.register_script(_QUOTA_GIVE)
        self._settling: set[asyncio.Task[None]] = set()
        p = cfg.key_prefix
        self._gateways_key = f"{p}:gateways"
        self._gateway_prefix = f"{p}:gateway:"
        self._tenants_prefix = f"{p}:tenant_usage:"
        self._leases: dict[str, set[str]] = {}  # backend -> live lease ids (this gateway)
        self._releasing: dict[str, set[asyncio.Task[None]]] = {}  # backend -> releases under way
        self._released_offline: dict[str, set[str]] = {}
        self._tenant_delta: dict[tuple[str, str], float] = {}  # (class, tenant) -> tokens
        self._seen: dict[tuple[str, str], float] = {}  # its window's total at the last read
        self._window: int | None = None  # the window of the last read
        self.degraded = False
        self._retry_at = 0.0
        self.errors = 0
        self.rejoins = 0
        self.last_error: str | None = None

    def _lease_key(self, backend: str) -> str:
        return f"{self.cfg.key_prefix}:leases:{backend}"

    def _lease_id(self, request_id: str) -> str:
        return f"{self.gateway_id}:{request_id}"

    def held(self, backend: str) -> int:
        """Leases this gateway holds on `backend`."""
        return len(self._leases.get(backend, ()))

    # -- connection and degraded mode ---------------------------------------------------

    async def connect(self) -> bool:
        """Checks Redis at start. Unreachable: a warning and degraded mode, or a TargetError
        naming the field when `required`. True when connected."""
        try:
            await self._redis.ping()
        except _UNREACHABLE as exc:
            if self.cfg.required:
                raise TargetError(
                    f"{REDIS_FIELD}: cannot reach Redis at {self.cfg.url} ({exc}); "
                    "start it, or drop fleet.redis.required to serve degraded"
                ) from exc
            self._degrade(exc)
            return False
        except RedisError as exc:  # e.g. a wrong password: a config error, not an outage
            raise TargetError(f"{REDIS_FIELD}: Redis at {self.cfg.url} refused us ({exc})") from exc
        return True

    def _degrade(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._retry_at = self._clock() + self.cfg.rejoin_interval_s
        if not self.degraded:
            self.degraded = True
            log.warning(
                "shared state: Redis unreachable (%s); serving on local caps (cap / %d)",
                self.last_error,
                self.cfg.replicas,
            )

    async def _try_rejoin(self) -> bool:
        if self._clock() < self._retry_at:
            return False
        self._retry_at = self._clock() + self.cfg.rejoin_interval_s  # one try at a time
        try:
            await self._redis.ping()
            await self._reregister()
        except _UNREACHABLE as exc:
            self._degrade(exc)
            return False
        self.degraded = False
        self.rejoins += 1
        log.warning("shared state: Redis is back; shared caps again")
        return True

    async def _reregister(self) -> None:
        """After an outage: this gateway's live leases back in, the offline releases out."""
        async with self._redis.pipeline(transaction=True) as pipe:
            for backend, ids in self._released_offline.items():
                if ids:
                    pipe.zrem(self._lease_key(backend), *ids)
            await pipe.execute()
        self._released_offline.clear()
        await self._renew_all()

    # -- leases -------------------------------------------------------------------------

    async def acquire(self, backend: str, request_id: str, cap: int) -> bool:
        """Takes a slot on `backend` for a request; False when `cap` are already held
        (by all gateways; degraded: by this one, against its local cap). Waits first for
        this gateway's releases on `backend` under way, so a slot it just gave back is
        free by the time it asks."""
        pending = self._releasing.get(backend)
        if pending:
            await asyncio.wait(set(pending))
        lease = self._lease_id(request_id)
        mine = self._leases.setdefault(backend, set())
        if self.degraded and not await self._try_rejoin():
            return self._take_local(mine, lease, cap)
        ttl_ms = int(self.cfg.lease_ttl_s * 1000)
        try:
            ok = await self._acquire(keys=[self._lease_key(backend)], args=[lease, cap, ttl_ms])
        except _UNREACHABLE as exc:
            self._degrade(exc)
            return self._take_local(mine, lease, cap)
        if ok:
            mine.add(lease)
        return bool(ok)

    def _take_local(self, mine: set[str], lease: str, cap: int) -> bool:
        if len(mine) >= local_cap(cap, self.cfg.replicas):
            return False
        mine.add(lease)
        return True

    def release_soon(self, backend: str, request_id: str) -> None:
        """Starts `release` now (without waiting for it); a later `acquire` on the same
        backend waits for it."""
        task = asyncio.get_running_loop().create_task(self.release(backend, request_id))
        pending = self._releasing.setdefault(backend, set())
        pending.add(task)

        def done(t: asyncio.Task[None]) -> None:
            pending.discard(t)
            if not pending and self._releasing.get(backend) is pending:
                del self._releasing[backend]

        task.add_done_callback(done)

    async def release(self, backend: str, request_id: str) -> None:
        """Gives the slot back (never raises: an unreachable Redis lets the TTL do it)."""
        lease = self._lease_id(request_id)
        self._leases.get(backend, set()).discard(lease)
        if not self.degraded:
            try:
                await self._redis.zrem(self._lease_key(backend), lease)
                return
            except _UNREACHABLE as exc:
                self._degrade(exc)
        self._released_offline.setdefault(backend, set()).add(lease)

    async def _renew_all(self, backends: tuple[str, ...] = ()) -> dict[str, int]:
        names = tuple(dict.fromkeys((*self._leases, *backends)))
        if not names:
            return {}
        args: list[str | int] = [int(self.cfg.lease_ttl_s * 1000)]
        for b in names:
            ids = self._leases.get(b, set())
            args += [len(ids), *ids]
        counts = await self._renew(keys=[self._lease_key(b) for b in names], args=args)
        return dict(zip(names, (int(c) for c in counts), strict=True))

    # -- tenants and aggregates ---------------------------------------------------------

    def charge_tenant(self, cls: str, tenant: str, tokens: float) -> None:
        """Adds service to a tenant's shared counter at the next `sync` (past `max_tenants`
        buffered, to `~overflow`)."""
        key = (cls, tenant)
        if key not in self._tenant_delta and len(self._tenant_delta) >= self.cfg.max_tenants:
            key = (cls, OVERFLOW_TENANT)
        self._tenant_delta[key] = self._tenant_delta.get(key, 0.0) + tokens

    async def sync(
        self,
        queue_depth: float,
        arrival_rate: float,
        backends: tuple[str, ...] = (),
        tenants: Mapping[str, Sequence[str]] | None = None,
    ) -> SyncResult:
        """Renews leases, publishes this gateway's queue depth and arrival rate, flushes
        tenant usage and reads what the others served `tenants` (per class); returns the
        shared view. Degraded: tries to rejoin first."""
        if self.degraded and not await self._try_rejoin():
            return SyncResult(degraded=True, leases={b: self.held(b) for b in backends})
        tenants = tenants or {}
        delta, self._tenant_delta = self._tenant_delta, {}
        try:
            leases = await self._renew_all(backends)
            ttl_ms = int(max(self.cfg.lease_ttl_s, 3 * self.cfg.sync_interval_s) * 1000)
            n, depth, rate = await self._publish(
                keys=[self._gateways_key, self._gateway_prefix + self.gateway_id],
                args=[self.gateway_id, queue_depth, arrival_rate, ttl_ms, self._gateway_prefix],
            )
            totals = await self._flush_tenants(delta, tenants) if delta or tenants else None
        except _UNREACHABLE as exc:
            for (cls, tenant), tokens in delta.items():  # not counted: kept for the next sync
                self.charge_tenant(cls, tenant, tokens)
            self._degrade(exc)
            return SyncResult(degraded=True, leases={b: self.held(b) for b in backends})
        served = self._served(totals, delta, tenants) if totals is not None else {}
        return SyncResult(
            degraded=False,
            leases=leases,
            aggregate=FleetAggregate(int(n), float(depth), float(rate)),
            fleet_service=served,
        )

    async def _flush_tenants(
        self, delta: dict[tuple[str, str], float], tenants: Mapping[str, Sequence[str]]
    ) -> list[str]:
        """One script: `delta` into the current window, then the totals of `tenants`."""
        by_class: dict[str, list[str | float]] = {}
        for (cls, tenant), tokens in delta.items():
            by_class.setdefault(cls, []).extend((tenant, tokens))
        args: list[str | float | int] = [
            self._tenants_prefix,
            int(self.cfg.tenant_window_s * 1000),
            self.cfg.max_tenants,
            OVERFLOW_TENANT,
        ]
        for cls in dict.fromkeys((*by_class, *tenants)):
            charged = by_class.get(cls, [])
            read = tenants.get(cls, ())
            args += [cls, len(charged) // 2, *charged, len(read), *read]
        return [str(v) for v in await self._tenants(keys=[], args=args)]

    def _served(
        self,
        totals: list[str],
        delta: dict[tuple[str, str], float],
        tenants: Mapping[str, Sequence[str]],
    ) -> dict[str, dict[str, float]]:
        """What the others served each read tenant since this gateway's last read: the rise
        of its total less this gateway's own flush (across one window boundary: the rest
        of the previous window plus the new one). A tenant not read last time, or after a
        gap of more than one window, only sets its baseline."""
        window, values = int(float(totals[0])), iter(totals[1:])
        step = None if self._window is None else window - self._window
        seen: dict[tuple[str, str], float] = {}
        served: dict[str, dict[str, float]] = {}
        for cls in dict.fromkeys((*(c for c, _ in delta), *tenants)):
            for tenant in tenants.get(cls, ()):
                now_total, prev_total = float(next(values)), float(next(values))
                key = (cls, tenant)
                seen[key] = now_total
                base = self._seen.get(key)
                own = delta.get(key, 0.0)
                if base is None or step not in (0, 1):
                    continue
                rise = now_total - base if step == 0 else prev_total - base + now_total
                if rise - own > 1e-6:
                    served.setdefault(cls, {})[tenant] = rise - own
        self._seen, self._window = seen, window
        return served

    # -- quotas -------------------------------------------------------------------------

    def _quota_args(
        self, pairs: Sequence[tuple[BucketCharge, float]], speedup: float
    ) -> tuple[list[str], list[float]]:
        """Keys and per-key (refill per wall ms, burst, amount): the core's clock runs
        `speedup` x wall time, Redis' is wall time."""
        keys = [f"{self.cfg.key_prefix}:quota:{c.bucket}" for c, _ in pairs]
        args: list[float] = []
        for c, amount in pairs:
            args += [c.per_s * speedup / 1000.0, c.burst, amount]
        return keys, args

    async def charge_quota(self, plan: Plan, speedup: float = 1.0) -> Verdict | None:
        """Charges `plan` in Redis (one script: all buckets or none); its verdict with the
        wait in the core's clock, or None when Redis is unreachable (degraded: the core
        charges its own buckets at quota / replicas)."""
        if self.degraded and not await self._try_rejoin():
            return None
        keys, args = self._quota_args([(c, c.cost) for c in plan.charges], speedup)
        try:
            res = await self._quota_take(keys=keys, args=args)
        except _UNREACHABLE as exc:
            self._degrade(exc)
            return None
        ok, wait_ms, worst = int(res[0]), float(res[1]), int(res[2])
        limits: dict[Kind, RateLimit] = {}
        for c, level in zip(plan.charges, res[3:], strict=True):
            lvl = float(level)
            limits[c.kind] = RateLimit(c.burst, max(0.0, float(int(lvl + 1e-9))),
                                       max(0.0, c.burst - lvl) / c.per_s)  # fmt: skip
        wait = math.inf if wait_ms < 0 else wait_ms / 1000.0 * speedup
        refused = plan.charges[worst - 1].kind if not ok and worst else None
        return Verdict(bool(ok), 0.0 if ok else wait, refused, limits, shared=True)

    def settle_quota_soon(
        self, amounts: Sequence[tuple[BucketCharge, float]], speedup: float = 1.0
    ) -> None:
        """Gives each bucket its amount back (negative: charges it), without waiting;
        dropped while Redis is unreachable (its tenant keeps its reservation charged)."""
        if self.degraded or not amounts:
            return
        keys, args = self._quota_args(amounts, speedup)

        async def give() -> None:
            try:
                await self._quota_give(keys=keys, args=args)
            except _UNREACHABLE as exc:
                self._degrade(exc)

        task = asyncio.get_running_loop().create_task(give())
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def close(self) -> None:
        await self._redis.aclose()
