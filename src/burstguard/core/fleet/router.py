"""Which backend a released request goes to: a pure policy over what the gateway sees.

The queue decides *which* request goes next; the router decides *where*. Candidates are
the backends the fleet may route to now (active, circuit closed or a half-open trial) with
room under their in-flight cap. Policies:

- `score` (default): drop *saturated* backends — stale metrics (stale counts as saturated,
  not idle: llm-d PR #2492), engine waiting >= `saturated_waiting` or KV usage >=
  `saturated_kv` (llm-d's saturation thresholds) — unless that drops them all (fail open).
  Then pick the lowest

      score = work ahead x pace / max(1 - KV usage, kv_floor)
      work ahead = own in-flight tokens + waiting x request tokens + request tokens

  The work ahead of the request on that replica is counted in tokens: the gateway's own
  in-flight tokens (prompt + predicted output, exact and current, unlike a scrape that
  lags by up to its interval, so a burst does not herd onto the replica that looked idle
  at the last scrape), plus the engine's waiting requests (others' traffic; each costed
  like this request, the only size known), plus the request itself. The pace is the
  backend's recent time per output token, learned from its own streams (`Fleet`: each
  completed stream's TPOT, exponentially weighted by `speed_weight`), so the work ahead
  becomes time: a replica on a faster GPU, or a less loaded host, gets proportionally
  more. A backend with no sample yet is assumed at the median pace of the others (1 when
  none has one: plain tokens). Dividing by the free KV share makes a replica close to
  preemption look proportionally busier. A backend without metrics counts as waiting 0,
  KV 0.
- `round_robin`, `least_request` (fewest own in-flight requests): the baselines.

Ties go to the backend with fewer own in-flight requests, then rotate (equal backends
take turns instead of the first one taking every request).

With `affinity`, a request with prefix block hashes goes, among the unsaturated
candidates, to the first backend on its key's hash-ring walk within the bounded load
(`fleet.affinity`); the policy above picks for requests without a prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from burstguard.core.fleet.affinity import HashRing, affinity_key, bounded_capacity
from burstguard.core.fleet.config import RouterConfig


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class RouteRequest:
    """What the router knows of a request: its tokens (prompt + predicted output), the
    hashes of its prompt's leading 16-token blocks (empty: no affinity) and the backends
    it is restricted to (a gateway's subset hint; None: any)."""

    tokens: int
    prefix_hashes: tuple[int, ...] = ()
    allowed: frozenset[str] | None = None  # the backends it may go to (None: any)

    def __init__(
        self,
        tokens: int,
        prefix_hashes: tuple[int, ...] = (),
        allowed: frozenset[str] | None = None,
    ) -> None:
        self.tokens = tokens
        self.prefix_hashes = prefix_hashes
        self.allowed = allowed


@dataclass(slots=True, init=False)  # (init=False: see `core.engine.perf_model.BatchShape`)
class BackendView:
    """One routable backend as the router sees it at the moment of the decision."""

    url: str
    in_flight: int = 0  # the gateway's own requests on it
    in_flight_tokens: int = 0  # their prompt + predicted output tokens
    cap: float = math.inf  # the gateway's in-flight request cap for it
    waiting: int | None = None  # the engine's waiting requests (None: no metrics)
    kv_usage: float | None = None  # 0..1
    stale: bool = False  # it had metrics, and the last is older than `metrics_stale_s`
    seconds_per_token: float | None = None  # its streams' recent time per output token

    def __init__(
        self,
        url: str,
        in_flight: int = 0,
        in_flight_tokens: int = 0,
        cap: float = math.inf,
        waiting: int | None = None,
        kv_usage: float | None = None,
        stale: bool = False,
        seconds_per_token: float | None = None,
    ) -> None:
        self.url = url
        self.in_flight = in_flight
        self.in_flight_tokens = in_flight_tokens
        self.cap = cap
        self.waiting = waiting
        self.kv_usage = kv_usage
        self.stale = stale
        self.seconds_per_token = seconds_per_token

    @property
    def has_room(self) -> bool:
        return self.in_flight < self.cap


def is_saturated(b: BackendView, cfg: RouterConfig) -> bool:
    """Stale metrics, a waiting queue or a nearly full KV cache."""
    return (
        b.stale
        or (b.waiting is not None and b.waiting >= cfg.saturated_waiting)
        or (b.kv_usage is not None and b.kv_usage >= cfg.saturated_kv)
    )


def score(b: BackendView, req: RouteRequest, cfg: RouterConfig, seconds_per_token: float) -> float:
    """The work ahead of `req` on `b`, timed at `b`'s pace, per free KV share; lower is
    better. `seconds_per_token`: the pace to assume when `b` has none learned yet."""
    work = b.in_flight_tokens + (b.waiting or 0) * req.tokens + req.tokens
    per_token = b.seconds_per_token if b.seconds_per_token is not None else seconds_per_token
    return work * per_token / max(1.0 - (b.kv_usage or 0.0), cfg.kv_floor)


def _median_speed(backends: Sequence[BackendView]) -> float:
    """The pace assumed for a backend with none learned: the others' median, else 1."""
    known = sorted(b.seconds_per_token for b in backends if b.seconds_per_token is not None)
    return known[len(known) // 2] if known else 1.0


def _least(
    backends: list[BackendView], key: Callable[[BackendView], tuple[float, ...]], turn: int
) -> str:
    """The backend with the lowest key; equal ones take turns."""
    if len(backends) == 1:  # nothing to compare (a fleet of one: every dispatch)
        return backends[0].url
    keys = [key(b) for b in backends]
    best = min(keys)
    tied = [b for b, k in zip(backends, keys, strict=True) if k == best]
    return tied[turn % len(tied)].url


class Router:
    """Picks a backend for each released request; keeps only a turn counter and a ring."""

    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self._turn = 0
        self._ring = HashRing(cfg.ring_points)
        self.affinity_hits = 0  # requests placed by their prefix key
        self.affinity_spills = 0  # ... of those, not on the key's first backend (load bound)

    def pick(self, req: RouteRequest, backends: Sequence[BackendView]) -> str | None:
        """The backend for `req` among `backends` (routable ones); None when none has room."""
        room = [b for b in backends if b.has_room]
        if not room:
            return None
        turn = self._turn
        self._turn += 1
        if len(room) == 1 and not self.cfg.affinity:
            return room[0].url  # the only candidate, whatever the policy would weigh
        pool = [b for b in room if not is_saturated(b, self.cfg)] or room
        if self.cfg.affinity:  # before any policy: it picks for requests without a prefix
            placed = self._by_affinity(req, pool, [b.url for b in backends])
            if placed is not None:
                return placed
        policy = self.cfg.policy
        if policy == "round_robin":
            return room[turn % len(room)].url
        if policy == "least_request":
            return _least(room, lambda b: (b.in_flight,), turn)
        unknown = _median_speed(pool)
        return _least(pool, lambda b: (score(b, req, self.cfg, unknown), b.in_flight), turn)

    def _by_affinity(
        self, req: RouteRequest, pool: list[BackendView], members: list[str]
    ) -> str | None:
        key = affinity_key(req.prefix_hashes, self.cfg.affinity_blocks)
        if key is None:
            return None
        by_url = {b.url: b for b in pool}
        total = sum(b.in_flight for b in pool)
        limit = bounded_capacity(total, len(pool), self.cfg.affinity_load_factor)
        walk = [u for u in self._ring.walk(key, members) if u in by_url]
        for i, url in enumerate(walk):
            if by_url[url].in_flight + 1 <= limit:
                self.affinity_hits += 1
                self.affinity_spills += i > 0
                return url
        return None
