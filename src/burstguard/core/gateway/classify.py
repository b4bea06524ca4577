"""Which class and tenant a request is served as: one rule, which the live gateway and the
simulator both apply before `Arrive`, so a simulated request is classified as a deployed
one would be.

The class: the API key's tier wins, then the class header (`class_header`), then vLLM's
`priority` field (lower runs first: the best class whose rank is at least it, else the
worst), then `default_class`. A header naming no configured class is refused
(`UnknownClass`: a 400 `invalid_request` live, a record with status 400 in the simulator)
rather than served as the default: a client asking for a class it would not get is told.
Behind a Gateway API gateway (`burstguard epp`) two more requests' words name a class,
after the class header and before vLLM's `priority`: the InferenceObjective header
(`epp.objectives` maps a name to a class; a name that is a class is that class; another
is no choice) and a TTFT objective (`x-slo-ttft-ms`: the cheapest class, the worst rank,
whose `ttft_target_s` meets it; the best class with a target when none does). The key's
tier still wins, so a client cannot buy a better class by asking for a tight objective.
The tenant: the key's, then the tenant header, then `default_tenant`; one longer than
`limits.max_tenant_chars` is refused the same way (its state would be the client's to grow).
"""

from __future__ import annotations

from burstguard.core.gateway.api import BadRequest
from burstguard.core.gateway.config import GatewayConfig

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
        self._objectives = dict(config.epp.objectives)
        targets = [c for c in config.classes if c.ttft_target_s is not None]
        # worst rank first: the first that meets a TTFT objective is the cheapest that does
        self._by_target = sorted(targets, key=lambda c: -c.rank)

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

    def objective(self, name: str | None) -> str | None:
        """The class an InferenceObjective name stands for (None: no class choice)."""
        if name is None:
            return None
        if name in self._objectives:
            return self._objectives[name]
        return name if name in self._names else None

    def for_ttft_slo(self, slo: str | None) -> str | None:
        """The cheapest class whose TTFT target meets `slo` (milliseconds, as the header
        carries it); None when absent, not a positive number, or no class has a target."""
        if slo is None or not self._by_target:
            return None
        try:
            ms = float(slo)
        except ValueError:
            return None
        if not ms > 0 or ms == float("inf"):
            return None
        for c in self._by_target:
            assert c.ttft_target_s is not None
            if c.ttft_target_s * 1e3 <= ms:
                return c.name
        return self._by_target[-1].name

    def tenant(self, key_tenant: str | None = None, named: str | None = None) -> str:
        """The tenant of a request with key tenant `key_tenant` and tenant header `named`;
        `BadRequest` for one past `limits.max_tenant_chars`."""
        tenant = key_tenant or named or self._default_tenant
        if len(tenant) > (most := self._max_tenant_chars):
            raise BadRequest(f"{self._tenant_header}: longer than {most} characters")
        return tenant
