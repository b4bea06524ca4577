"""What metrics, logs and summaries call a backend: a name, never its address by default.

The fleet keys backends by URL (the router's ring, the caps, Redis leases); everything an
operator or a scraper reads names them instead, so an unauthenticated /metrics or a log
shipped elsewhere tells nobody where the engines are:

- a static `backends` entry: its `name`, else `backend-<i>` by its place in the list;
- any other (discovered by DNS or file, an autoscaled simulated replica):
  `backend-<8 hex digits of its URL's SHA-256>`. The same URL gets the same name after
  every re-discovery, after a gateway restart and on every gateway replica, so series
  from several replicas add up per backend; a new pod (a new address) is a new backend.
  A hash is no secret: whoever guesses an address can check the guess.

`by_url=True` (the config's `backend_labels: url`) names each backend by its URL, for an
operator who wants addresses in dashboards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def hashed_name(url: str) -> str:
    """A discovered backend's name: stable for its URL, not its address."""
    return "backend-" + hashlib.sha256(url.encode()).hexdigest()[:8]


class BackendNames:
    """url -> the name metrics and logs use (see the module doc)."""

    def __init__(self, static: Iterable[tuple[str, str | None]], *, by_url: bool = False) -> None:
        """`static`: (normalised URL, configured name or None) in config order."""
        self._by_url = by_url
        self._static = {url: name or f"backend-{i}" for i, (url, name) in enumerate(static)}
        self._cache: dict[str, str] = {}

    def __call__(self, url: str) -> str:
        if self._by_url:
            return url
        name = self._static.get(url)
        if name is not None:
            return name
        name = self._cache.get(url)
        if name is None:
            if len(self._cache) >= 4096:  # churn through many addresses: bounded memory
                self._cache.clear()
            name = self._cache[url] = hashed_name(url)
        return name

    def all(self, urls: Iterable[str]) -> list[str]:
        return [self(u) for u in urls]
