"""A fault schedule for the simulated fleet: `burstguard sim --faults FILE`.

A list of `{replica: R, at: T, kind: kill|stall|wedge, restart_after: D}` (YAML or JSON; times in
engine seconds, the simulator's clock): at T replica R (the R-th the run starts with,
`sim.replicas.replica_id`) is killed or stalled, and after D more seconds it restarts
empty (no `restart_after`: it stays down). What the gateway does about it is the core's
failure rules, fed the events the live relay would feed them (`sim.gateway_loop`).
"""

from __future__ import annotations

import enum
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from burstguard.errors import FileError, read_user_text

KEYS = ("replica", "at", "kind", "restart_after")


class FaultKind(enum.StrEnum):
    KILL = "kill"  # the process dies: its connections reset, new ones are refused
    STALL = "stall"  # it stops stepping: connections stay open, nothing comes back
    WEDGE = "wedge"  # a stall whose HTTP server still answers /health (a wedged GPU)


class FaultFileError(FileError):
    """A fault schedule that cannot be run; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class Fault:
    replica: int
    at_s: float
    kind: FaultKind
    restart_after_s: float | None = None

    @property
    def until_s(self) -> float:
        """When the replica is back (inf: never)."""
        return math.inf if self.restart_after_s is None else self.at_s + self.restart_after_s


def load_faults(path: Path) -> tuple[Fault, ...]:
    """The schedule in `path` (YAML, of which JSON is a subset), checked."""
    try:
        text = read_user_text(path)
    except OSError as exc:
        raise FaultFileError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1}"
        problem = getattr(exc, "problem", None) or "unreadable"
        raise FaultFileError(f"{path}: neither YAML nor JSON ({problem}{where})") from None
    return parse_faults(doc, str(path))


def parse_faults(doc: object, where: str = "faults") -> tuple[Fault, ...]:
    """Faults from a loaded document: a list of mappings with `KEYS`."""
    if not isinstance(doc, list) or not doc:
        raise FaultFileError(
            f"{where}: expected a list of faults, e.g. "
            + json.dumps([{"replica": 0, "at": 30, "kind": "kill", "restart_after": 20}])
        )
    faults = tuple(_fault(entry, f"{where}: fault {i + 1}") for i, entry in enumerate(doc))
    _check_overlaps(faults, where)
    return faults


def _number(entry: dict[object, object], key: str, where: str, positive: bool) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FaultFileError(f"{where}: {key} must be a number of seconds, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise FaultFileError(f"{where}: {key} must be {'> 0' if positive else '>= 0'} s")
    return float(value)


def _fault(entry: object, where: str) -> Fault:
    if not isinstance(entry, dict):
        raise FaultFileError(f"{where}: expected a mapping with {', '.join(KEYS)}")
    unknown = sorted(str(k) for k in entry if k not in KEYS)
    if unknown:
        raise FaultFileError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    for key in KEYS[:3]:
        if key not in entry:
            raise FaultFileError(f"{where}: {key} is missing")
    replica = entry["replica"]
    if isinstance(replica, bool) or not isinstance(replica, int) or replica < 0:
        raise FaultFileError(f"{where}: replica must be a replica index >= 0, not {replica!r}")
    kinds = [k.value for k in FaultKind]
    if entry["kind"] not in kinds:
        raise FaultFileError(f"{where}: kind must be one of {', '.join(kinds)}, "
                             f"not {entry['kind']!r}")  # fmt: skip
    restart = entry.get("restart_after")
    return Fault(
        replica, _number(entry, "at", where, positive=False), FaultKind(entry["kind"]),
        None if restart is None else _number(entry, "restart_after", where, positive=True),
    )  # fmt: skip


def _check_overlaps(faults: tuple[Fault, ...], where: str) -> None:
    """A replica takes one fault at a time: the next only once it is back."""
    by_replica = sorted(faults, key=lambda f: (f.replica, f.at_s))
    for a, b in itertools.pairwise(by_replica):
        if a.replica == b.replica and b.at_s < a.until_s:
            raise FaultFileError(
                f"{where}: replica {a.replica} is still down ({a.kind} at {a.at_s:g} s) at "
                f"{b.at_s:g} s; a replica takes its next fault once it has restarted"
            )


def check_replicas(faults: tuple[Fault, ...], replicas: int, where: str = "faults") -> None:
    """Every fault names a replica the run starts with."""
    for f in faults:
        if f.replica >= replicas:
            raise FaultFileError(
                f"{where}: replica {f.replica} does not exist (the run starts with "
                f"{replicas}: 0..{replicas - 1})"
            )
