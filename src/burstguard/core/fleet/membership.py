"""Which backends take new requests: discovery's latest list, diffed against the current one.

A backend that leaves the list is *draining*: it gets no new request and is dropped once its
in-flight requests have finished (the caller says when: `Fleet` counts them). One that comes
back while still draining is active again at once, with its state kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MembershipChange:
    """What one `Membership.update` changed; all empty when the list is the same."""

    added: tuple[str, ...] = ()
    draining: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()  # was draining, listed again

    def __bool__(self) -> bool:
        return bool(self.added or self.draining or self.restored)


class Membership:
    """Active backends (in discovery order) and draining ones. The lists are read on every
    dispatch and change only with discovery: they are kept as tuples, built on change."""

    def __init__(self) -> None:
        self._active: dict[str, None] = {}  # an ordered set
        self._draining: dict[str, None] = {}
        self.active: tuple[str, ...] = ()
        self.draining: tuple[str, ...] = ()
        self.all: tuple[str, ...] = ()  # active first, then draining

    def _changed(self) -> None:
        self.active, self.draining = tuple(self._active), tuple(self._draining)
        self.all = self.active + self.draining

    def is_active(self, url: str) -> bool:
        return url in self._active

    def update(self, urls: Iterable[str]) -> MembershipChange:
        """Makes `urls` the active set (normalised URLs, duplicates ignored)."""
        desired = dict.fromkeys(urls)
        added = tuple(u for u in desired if u not in self._active and u not in self._draining)
        restored = tuple(u for u in desired if u in self._draining)
        leaving = tuple(u for u in self._active if u not in desired)
        for u in restored:
            del self._draining[u]
        for u in leaving:
            del self._active[u]
            self._draining[u] = None
        self._active = {u: None for u in desired}
        self._changed()
        return MembershipChange(added, leaving, restored)

    def drop(self, url: str) -> bool:
        """Forgets a draining backend (its last request finished); False if it is not one."""
        if url not in self._draining:
            return False
        del self._draining[url]
        self._changed()
        return True
