"""Discovery against real sources: a watched file on disk and DNS names; config errors."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from burstguard.errors import BurstguardError
from burstguard.gateway.fleet.config import (
    DiscoveryConfig,
    DnsDiscovery,
    FileDiscovery,
    FleetConfig,
    check_backend_urls,
)
from burstguard.gateway.fleet.fleet import Fleet
from burstguard.gateway.fleet.sources import Discovery, parse_backend_file, resolve_dns


async def _until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_watched_file_adds_and_drains_backends(tmp_path: Path) -> None:
    path = tmp_path / "backends.txt"
    path.write_text("# engines\nhttp://10.0.0.1:8000\nhttp://10.0.0.2:8000/  # trailing slash\n")
    fleet = Fleet(FleetConfig())
    changes = []
    disc = Discovery(
        ["http://10.0.0.9:8000"],
        DiscoveryConfig(file=FileDiscovery(path=str(path), interval_s=0.05)),
        lambda urls: changes.append(fleet.set_backends(urls, 0.0)),
    )
    try:
        urls = await disc.start()
        assert urls == ("http://10.0.0.9:8000", "http://10.0.0.1:8000", "http://10.0.0.2:8000")
        # replace atomically (as a ConfigMap update does): one gone, one new
        tmp = tmp_path / "new.txt"
        tmp.write_text("http://10.0.0.2:8000\nhttp://10.0.0.3:8000\n")
        os.replace(tmp, path)
        await _until(lambda: len(changes) == 2)
        assert changes[1].added == ("http://10.0.0.3:8000",)
        assert changes[1].draining == ("http://10.0.0.1:8000",)
        # a bad edit keeps the last good list and is counted
        path.write_text("not a url\n")
        await _until(lambda: disc.errors > 0)
        assert "fleet.discovery.file.path" in (disc.last_error or "")
        assert disc.urls[-1] == "http://10.0.0.3:8000" and len(changes) == 2
    finally:
        await disc.stop()


async def test_missing_file_at_start_names_the_field(tmp_path: Path) -> None:
    cfg = DiscoveryConfig(file=FileDiscovery(path=str(tmp_path / "nope.txt")))
    with pytest.raises(BurstguardError, match=r"fleet\.discovery\.file\.path: cannot read"):
        await Discovery([], cfg, lambda urls: None).start()


async def test_a_file_that_is_not_text_keeps_the_list_and_the_watch(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (a half-written or clobbered file) are a bad edit like any
    other: the last list stays and a later good edit is still picked up. At start they are
    a BurstguardError naming the file, not a traceback."""
    path = tmp_path / "backends.txt"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    cfg = DiscoveryConfig(file=FileDiscovery(path=str(path), interval_s=0.05))
    with pytest.raises(BurstguardError, match="not a UTF-8 text file"):
        await Discovery([], cfg, lambda urls: None).start()
    path.write_text("\ufeffhttp://10.0.0.1:8000\n")  # a BOM, as some editors write, is fine
    disc = Discovery([], cfg, lambda urls: None)
    try:
        assert await disc.start() == ("http://10.0.0.1:8000",)
        path.write_bytes(b"http://10.0.0.2:8000\n\xff\n")
        await _until(lambda: disc.errors > 0)
        assert "not a UTF-8 text file" in (disc.last_error or "")
        assert disc.urls == ("http://10.0.0.1:8000",)
        path.write_text("http://10.0.0.3:8000\n")
        await _until(lambda: disc.urls == ("http://10.0.0.3:8000",))
    finally:
        await disc.stop()


async def test_dns_name_resolves_to_all_its_addresses() -> None:
    urls = await resolve_dns(DnsDiscovery(name="localhost", port=8000))
    assert "http://127.0.0.1:8000" in urls
    assert all(u.endswith(":8000") for u in urls)
    seen: list[tuple[str, ...]] = []
    disc = Discovery([], DiscoveryConfig(dns=DnsDiscovery(name="localhost", port=9)), seen.append)
    try:
        assert "http://127.0.0.1:9" in await disc.start()
        assert seen == [disc.urls]
    finally:
        await disc.stop()


async def test_unresolvable_dns_at_start_names_the_field() -> None:
    cfg = DiscoveryConfig(dns=DnsDiscovery(name="no-such-backend.invalid", port=8000))
    with pytest.raises(BurstguardError, match=r"fleet\.discovery\.dns\.name: 'no-such-backend"):
        await Discovery([], cfg, lambda urls: None).start()


def test_duplicate_and_bad_backends_name_the_field() -> None:
    with pytest.raises(
        BurstguardError, match=r"backends\.2: 'http://A:8000/' is the same backend as"
    ):
        check_backend_urls(["http://a:8000", "http://b:8000", "http://A:8000/"], "backends")
    with pytest.raises(BurstguardError, match=r"backends\.0: 'ftp://x' is not an http"):
        check_backend_urls(["ftp://x"], "backends")
    with pytest.raises(BurstguardError, match=r"f\.txt:3: .* same backend as line 1"):
        parse_backend_file("http://x:1\n\nhttp://x:1/\n", "f.txt")
    assert check_backend_urls(["http://[::1]:8000/v1/"], "backends") == ("http://[::1]:8000/v1",)
    for bad, why in (
        ("http://a b:8000", "is not an http"),  # urlsplit takes it; no resolver would
        ("http://a%20b:8000", "is not an http"),
        ("http://[::1:8000", "is not a URL"),  # urlsplit's ValueError, named
        ("http://[zz::1]:8000", "is not a URL"),
        ("http://user:pw@h:8000", "no user, query or fragment"),  # it would be dropped
        ("http://h:8000/?token=x", "no user, query or fragment"),
    ):
        with pytest.raises(BurstguardError, match=rf"backends\.0: .*{why}"):
            check_backend_urls([bad], "backends")
        with pytest.raises(BurstguardError, match=rf"f\.txt:2: .*{why}"):
            parse_backend_file(f"http://ok:1\n{bad}\n", "f.txt")


async def test_dns_is_re_resolved_and_a_failure_keeps_the_last_list() -> None:
    """The polling loop with a scripted resolver (the real resolver is tested above): a
    pod set that changes is followed, a lookup that fails drains nothing."""
    answers: list[tuple[str, ...] | OSError] = [
        ("http://10.0.0.1:80", "http://10.0.0.2:80"),
        ("http://10.0.0.2:80", "http://10.0.0.3:80"),
        OSError("temporary failure in name resolution"),
    ]

    async def resolver(_: DnsDiscovery) -> tuple[str, ...]:
        answer = answers[0] if len(answers) == 1 else answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    seen: list[tuple[str, ...]] = []
    cfg = DiscoveryConfig(dns=DnsDiscovery(name="engines.svc", port=80, interval_s=0.02))
    disc = Discovery([], cfg, seen.append, resolver=resolver)
    try:
        await disc.start()
        await _until(lambda: disc.errors >= 2)
    finally:
        await disc.stop()
    assert seen == [
        ("http://10.0.0.1:80", "http://10.0.0.2:80"),
        ("http://10.0.0.2:80", "http://10.0.0.3:80"),
    ]
    assert disc.urls == seen[-1] and "engines.svc" in (disc.last_error or "")
