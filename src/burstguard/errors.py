"""Errors a user can fix, raised by library code as specific exceptions with a message
that says what is wrong and what to do; the CLI (`burstguard.cli.main`) prints any
`BurstguardError` as one line and exits with code 2. Library code never decides exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class BurstguardError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class ConfigError(BurstguardError):
    """A setting is invalid: a config file's field, a flag's value, a profile or policy."""


class FileError(BurstguardError):
    """A file the user named cannot be read, parsed or written (a trace, a prompt or
    backend list, an output file)."""


class TargetError(BurstguardError):
    """Something to measure or run is unusable: a server unreachable or not answering as
    it should, a program not installed or failing to start."""


class UserError(BurstguardError):
    """The command line itself is wrong (flags that contradict or miss each other); raised
    by the command modules (`*/cli.py`)."""


def read_user_text(path: Path) -> str:
    """A text file the user gave (a leading BOM dropped): not UTF-8 is a FileError naming
    the file and the byte; OSError (missing, unreadable) is the caller's to word."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise FileError(f"{path}: not a UTF-8 text file ({where})") from None


def check_writable(path: Path, flag: str) -> None:
    """Refuses now, not after a long run whose results would be lost, an output file that
    cannot be created: its folder is made, the file opened to append (and removed again
    if it did not exist)."""
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise FileError(
            f"{flag} {path}: cannot write it ({exc.filename}: {exc.strerror})"
        ) from None
    if not existed:
        path.unlink()


def describe_validation_error(exc: ValidationError) -> str:
    """One wording for every config file's errors (gateway, scaling policy), one line per
    error: `field.path: message (got value)`."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        plain = not isinstance(got, dict | list) and err["type"] != "missing"
        shown = f" (got {got!r})" if plain else ""
        lines.append(f"{where}: {msg}{shown}")
    return "; ".join(lines)
