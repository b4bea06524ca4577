"""Driving a GatewayCore through `handle` alone, as the shells do, in unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from burstguard.gateway.core import GatewayCore
from burstguard.gateway.events import Arrive, Effect, Reject, Release
from burstguard.gateway.request import GatewayRequest


def releases(effects: list[Effect]) -> list[GatewayRequest]:
    return [e.req for e in effects if isinstance(e, Release)]


def rejects(effects: list[Effect]) -> list[Reject]:
    return [e for e in effects if isinstance(e, Reject)]


@contextmanager
def unlisted(gw: GatewayCore, now: float) -> Iterator[None]:
    """No backend is listed inside (scaling from zero, or discovery lost them): arrivals
    queue and ends free their slots, but nothing is released until the backends are
    listed again at the end (the next event releases what fits). Lets a test queue a
    whole scenario before the first pick, or end several requests before the next."""
    urls = gw.fleet.backends
    gw.fleet.set_backends((), now)
    yield
    gw.fleet.set_backends(urls, now)


def queue(gw: GatewayCore, reqs: list[GatewayRequest], now: float | None = None) -> list[Effect]:
    """`reqs` arrive (at `now`, else each at its arrival time) and all queue before any is
    released; the effects (rejections, evictions)."""
    with unlisted(gw, reqs[0].arrival_s if now is None else now):
        return [x for r in reqs for x in gw.handle(Arrive(r), r.arrival_s if now is None else now)]
