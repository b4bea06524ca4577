"""Backend URLs in one spelling: what the gateway's backend list, its discovery, the
autoscaler's --gateway and the scaling export's --prometheus all accept."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from burstguard.errors import ConfigError

__all__ = ["normalize_backend_url"]

_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def normalize_backend_url(url: str, field: str) -> str:
    """`scheme://host:port/path` without a trailing slash, scheme and host in lower case, so
    that the same backend written two ways is one backend; ConfigError naming `field` for
    anything else (a host with spaces or odd characters, a bad port or IPv6 address, or a
    user, query or fragment, which the gateway would otherwise drop without a word)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{field}: {url!r} is not a URL ({exc})") from None
    host = (parts.hostname or "").lower()
    if (
        parts.scheme.lower() not in ("http", "https")
        or not host
        or not (_HOST_NAME.fullmatch(host) or ":" in host)  # IPv6: urlsplit checked it
    ):
        raise ConfigError(f"{field}: {url!r} is not an http(s)://host[:port] URL")
    if parts.username is not None or parts.query or parts.fragment:
        raise ConfigError(f"{field}: {url!r}: a backend URL takes no user, query or fragment")
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"
