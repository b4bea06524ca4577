"""Discovery's I/O: backend URLs from the static list, a DNS name, a watched file.

- DNS: the name is resolved to *all* its addresses (a Kubernetes headless Service has one
  A record per ready pod) every `interval_s`; each address becomes `scheme://addr:port`.
- File: one URL per line, `#` starts a comment; the file is checked every `interval_s`
  (modification time, size, inode: an atomic rename or a ConfigMap symlink swap counts)
  and re-read when it changed.

At start every source must work: an unresolvable name (`TargetError`) or an unreadable or
invalid file (`FileError`) is refused naming the config field. Later, a failed resolution
or a bad edit keeps the last good list (a DNS blip must not drain the fleet) and is
counted and logged.
`Discovery` merges the sources and calls `on_change` with the merged list when it changes;
`Fleet.set_backends` takes that list.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from burstguard.errors import BurstguardError, FileError, TargetError, read_user_text
from burstguard.gateway.fleet.config import DiscoveryConfig, DnsDiscovery, FileDiscovery
from burstguard.wire.urls import normalize_backend_url

log = logging.getLogger("burstguard.gateway.fleet")

DNS_FIELD = "fleet.discovery.dns.name"
FILE_FIELD = "fleet.discovery.file.path"


def parse_backend_file(text: str, source: str) -> tuple[str, ...]:
    """The normalised URLs a backend file lists; a bad or repeated line is a FileError
    naming `source:line`."""
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        url = normalize_backend_url(line, f"{source}:{lineno}")
        if url in seen:
            raise FileError(
                f"{source}:{lineno}: {line!r} is the same backend as line {seen[url]}; "
                "list each backend once"
            )
        seen[url] = lineno
    return tuple(seen)


def address_urls(addresses: Iterable[str], scheme: str, port: int) -> tuple[str, ...]:
    """`scheme://address:port` for each distinct address, sorted (IPv6 in brackets)."""
    out = set()
    for addr in addresses:
        host = f"[{addr}]" if ipaddress.ip_address(addr).version == 6 else addr
        out.add(f"{scheme}://{host}:{port}")
    return tuple(sorted(out))


async def resolve_dns(cfg: DnsDiscovery) -> tuple[str, ...]:
    """All addresses of `cfg.name` as backend URLs; raises OSError when it does not resolve."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        cfg.name, cfg.port, type=socket.SOCK_STREAM
    )
    return address_urls((str(info[4][0]) for info in infos), cfg.scheme, cfg.port)


def _file_stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_backend_file(cfg: FileDiscovery) -> tuple[str, ...]:
    """The URLs the file lists; OSError when unreadable, FileError when invalid (not UTF-8
    included: any other error would end the watch for good)."""
    path = Path(cfg.path)
    return parse_backend_file(read_user_text(path), str(path))


class Discovery:
    """The merged backend list of all sources, kept current in the background."""

    def __init__(
        self,
        static: Iterable[str],
        cfg: DiscoveryConfig,
        on_change: Callable[[tuple[str, ...]], None],
        *,
        resolver: Callable[[DnsDiscovery], Awaitable[tuple[str, ...]]] = resolve_dns,
    ) -> None:
        self._cfg = cfg
        self._resolve = resolver
        self._on_change = on_change
        self._lists: dict[str, tuple[str, ...]] = {"static": tuple(static)}
        self._merged: tuple[str, ...] = ()
        self._file_stamp: tuple[int, int, int] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.errors = 0
        self.last_error: str | None = None

    @property
    def urls(self) -> tuple[str, ...]:
        return self._merged

    async def start(self) -> tuple[str, ...]:
        """Reads every source once (a failure is a TargetError or FileError naming the
        field), then keeps the dynamic ones polled. Returns the merged list."""
        try:
            await self._first_reads()
        except BurstguardError:
            await self.stop()
            raise
        self._merge()
        return self._merged

    async def _first_reads(self) -> None:
        dns, file = self._cfg.dns, self._cfg.file
        if dns is not None:
            try:
                self._lists["dns"] = await self._resolve(dns)
            except OSError as exc:
                raise TargetError(f"{DNS_FIELD}: {dns.name!r} does not resolve ({exc})") from exc
            self._tasks.append(asyncio.create_task(self._poll(dns.interval_s, self.refresh_dns)))
        if file is not None:
            try:
                self._file_stamp = _file_stamp(Path(file.path))
                self._lists["file"] = read_backend_file(file)
            except OSError as exc:
                raise FileError(f"{FILE_FIELD}: cannot read {file.path!r} ({exc})") from exc
            self._tasks.append(asyncio.create_task(self._poll(file.interval_s, self.refresh_file)))

    async def refresh_dns(self) -> None:
        assert self._cfg.dns is not None
        try:
            self._lists["dns"] = await self._resolve(self._cfg.dns)
        except OSError as exc:
            self._error(f"{DNS_FIELD}: {self._cfg.dns.name!r}: {exc}; keeping the last list")
            return
        self._merge()

    async def refresh_file(self) -> None:
        assert self._cfg.file is not None
        try:
            stamp = _file_stamp(Path(self._cfg.file.path))
            if stamp == self._file_stamp:
                return
            self._lists["file"] = read_backend_file(self._cfg.file)
            self._file_stamp = stamp
        except (OSError, BurstguardError) as exc:
            self._error(f"{FILE_FIELD}: {exc}; keeping the last list")
            return
        self._merge()

    def _error(self, message: str) -> None:
        self.errors += 1
        if message != self.last_error:  # once per distinct problem, not every poll
            log.warning("discovery: %s", message)
        self.last_error = message

    def _merge(self) -> None:
        merged = tuple(dict.fromkeys(u for urls in self._lists.values() for u in urls))
        if merged != self._merged:
            self._merged = merged
            self._on_change(merged)

    async def _poll(self, interval_s: float, refresh: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await refresh()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
