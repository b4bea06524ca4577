"""API keys: who is calling (tenant) and which priority class they get (tier).

Keys are compared in constant time (hmac.compare_digest) against every configured key, so
the time to answer does not reveal how much of a guessed key was right.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from burstguard.core.gateway.config import ApiKeyConfig
from burstguard.core.gateway.quota import key_id


@dataclass(frozen=True, slots=True)
class Identity:
    """The caller a valid key belongs to."""

    tenant: str
    tier: str
    key_id: str | None = None  # `quota.key_id`: names the key's own quota bucket


class AuthError(Exception):
    """No key or a wrong key while keys are configured (answered with 401)."""


class KeyAuthenticator:
    """Checks `Authorization: Bearer <key>` (or `x-api-key`) against the configured keys."""

    def __init__(self, keys: Sequence[ApiKeyConfig]) -> None:
        self._keys = [(k.key.encode(), Identity(k.tenant, k.tier, key_id(k.key))) for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None, api_key: str | None) -> Identity | None:
        """The caller's identity; None when no keys are configured; AuthError otherwise."""
        if not self._keys:
            return None
        presented = _bearer(authorization) or api_key
        if not presented:
            raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
        given = presented.encode()
        found: Identity | None = None
        for key, identity in self._keys:  # no early exit: every key is compared
            if hmac.compare_digest(key, given):
                found = identity
        if found is None:
            raise AuthError("invalid API key")
        return found


def check_bearer(authorization: str | None, key: str | None) -> None:
    """AuthError unless `authorization` is `Bearer <key>` (`key` None: nothing is
    required). For /metrics (`metrics.api_key`): one key, no tenant, no `x-api-key`."""
    if key is None:
        return
    presented = _bearer(authorization)
    if not presented:
        raise AuthError("missing metrics key: send 'Authorization: Bearer <key>'")
    if not hmac.compare_digest(key.encode(), presented.encode()):
        raise AuthError("invalid metrics key")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
