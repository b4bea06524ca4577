"""User-facing errors: raised anywhere, printed by the CLI as one line, exit code 2."""


class UserError(Exception):
    """Bad input or an unusable target. The message says what is wrong and what to do."""

    exit_code = 2
