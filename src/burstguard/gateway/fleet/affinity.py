"""Prefix affinity: requests that share a prompt prefix go to the same replica, whose prefix
cache then holds it, by consistent hashing with bounded load (Mirrokni, Thorup and
Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018).

- The key of a request is its first `affinity_blocks` prefix block hashes (16-token blocks,
  chained as vLLM's prefix cache chains them, so equal keys mean equal leading tokens;
  `burstguard.wire.prefix`: the live gateway hashes the prompt's text, the simulator the text
  bench would send for the workload's request).
- Each backend has `ring_points` points on a 64-bit ring; the key's point walks clockwise
  to the first backend that may take it.
- Bounded load: a backend may take the request only while its in-flight requests + 1 stay
  within `ceil(load_factor x (total in flight + 1) / backends)`; so affinity never puts
  more than `load_factor` times the mean load on one replica, and a hot prefix spills to
  the next replicas on the ring (always the same ones, which then cache it too).

Hashes are blake2b, not Python's `hash` (salted per process): every gateway replica and
the simulator place a key on the same backend.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from burstguard.wire.prefix import h64


def affinity_key(prefix_hashes: Sequence[int], blocks: int) -> int | None:
    """The ring key of a request: its first `blocks` block hashes; None without one."""
    head = prefix_hashes[:blocks]
    if not head:
        return None
    return h64(b"".join((h & (2**64 - 1)).to_bytes(8, "big") for h in head))


class HashRing:
    """Backends' points on a 64-bit ring, rebuilt only when the set of backends changes."""

    def __init__(self, points_per_backend: int) -> None:
        self._points_per = points_per_backend
        self._members: tuple[str, ...] = ()
        self._points: list[int] = []
        self._owners: list[str] = []

    def _build(self, members: tuple[str, ...]) -> None:
        placed = sorted(
            (h64(f"{url}#{i}".encode()), url) for url in members for i in range(self._points_per)
        )
        self._points = [p for p, _ in placed]
        self._owners = [u for _, u in placed]
        self._members = members

    def walk(self, key: int, members: Sequence[str]) -> list[str]:
        """`members` in the order the key's clockwise walk meets them."""
        ordered = tuple(sorted(members))
        if ordered != self._members:
            self._build(ordered)
        if not self._points:
            return []
        start = bisect.bisect_left(self._points, key)
        seen: dict[str, None] = {}
        n = len(self._points)
        for k in range(n):
            seen.setdefault(self._owners[(start + k) % n])
            if len(seen) == len(ordered):
                break
        return list(seen)


def bounded_capacity(total_in_flight: int, backends: int, load_factor: float) -> int:
    """The most in-flight requests (this one included) one backend may hold under affinity."""
    return math.ceil(load_factor * (total_in_flight + 1) / backends)
