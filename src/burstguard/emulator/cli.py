"""CLI commands of burstguard.emulator."""

import typer


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the burstguard app."""
