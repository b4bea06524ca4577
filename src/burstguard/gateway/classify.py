"""Which class and tenant a request is served as: one rule, which the live gateway and the
simulator both apply before `Arrive`, so a simulated request is classified as a deployed
one would be.

The class: the API key's tier wins, then the class header (`class_header`), then vLLM's
`priority` field (lower runs first: the best class whose rank is at least it, else the
worst), then `default_class`. A header naming no configured class is refused
(`UnknownClass`: a 400 `invalid_request` live, a record with status 400 in the simulator)
rather than served as the default: a client asking for a class it would not get is told.
The tenant: the key's, then the tenant header, then `default_tenant`; one longer than
`limits.max_tenant_chars` is refused the same way (its state would be the client's to grow).
"""

from __future__ import annotations

from burstguard.gateway.api import BadRequest
from burstguard.gateway.config import GatewayConfig

__all__ = ["Classifier", "UnknownClass"]


class UnknownClass(BadRequest):
    """The class header names no configured class (answered with 400)."""


class Classifier:
    """The classification rule of one gateway config."""

    def __init__(self, config: GatewayConfig) -> None:
        self._names = frozenset(c.name for c in config.classes)
        self._by_rank = sorted(config.classes, key=lambda c: c.rank)
        self._default = config.default_class
        self._class_header = config.class_header
        self._tenant_header = config.tenant_header
        self._default_tenant = config.default_tenant
        self._max_tenant_chars = config.limits.max_tenant_chars

    def classify(
        self, tier: str | None = None, named: str | None = None, priority: int | None = None
    ) -> str:
        """The class of a request with key tier `tier`, class header `named` and vLLM
        `priority` (each None where absent); `UnknownClass` for a header naming none."""
        if tier is not None:
            return tier  # the config checked every key's tier names a class
        if named is not None:
            if named not in self._names:
                known = ", ".join(sorted(self._names))
                raise UnknownClass(f"{self._class_header}: {named[:64]!r} is not one of {known}")
            return named
        if priority is not None:  # vLLM's convention: lower runs first
            for c in self._by_rank:
                if c.rank >= priority:
                    return c.name
            return self._by_rank[-1].name
        return self._default

    def tenant(self, key_tenant: str | None = None, named: str | None = None) -> str:
        """The tenant of a request with key tenant `key_tenant` and tenant header `named`;
        `BadRequest` for one past `limits.max_tenant_chars`."""
        tenant = key_tenant or named or self._default_tenant
        if len(tenant) > (most := self._max_tenant_chars):
            raise BadRequest(f"{self._tenant_header}: longer than {most} characters")
        return tenant
