"""User-facing errors: raised anywhere, printed by the CLI as one line, exit code 2."""

from pathlib import Path


class UserError(Exception):
    """Bad input or an unusable target. The message says what is wrong and what to do."""

    exit_code = 2


def read_user_text(path: Path) -> str:
    """A text file the user gave (a leading BOM dropped): not UTF-8 is a UserError naming
    the file and the byte; OSError (missing, unreadable) is the caller's to word."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise UserError(f"{path}: not a UTF-8 text file ({where})") from None
