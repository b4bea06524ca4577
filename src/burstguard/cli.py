"""The `burstguard` command. Each area registers its own subcommands from its `cli` module."""

from __future__ import annotations

import inspect
import sys

import typer

from burstguard.errors import BurstguardError

USER_ERROR_EXIT = 2  # the exit code of an error the user can fix (`BurstguardError`)

app = typer.Typer(
    name="burstguard",
    help="Reproduce, absorb, plan for and guard against bursty LLM traffic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Reproduce, absorb, plan for and guard against bursty LLM traffic."""


@app.command()
def version() -> None:
    """Print burstguard's version."""
    from burstguard import __version__

    print(__version__)


def _register_all() -> None:
    from burstguard.bench import cli as bench_cli
    from burstguard.calibrate import cli as calibrate_cli
    from burstguard.deploycheck import cli as deploy_cli
    from burstguard.diagnose import cli as diagnose_cli
    from burstguard.emulator import cli as emulator_cli
    from burstguard.engines import cli as engines_cli
    from burstguard.gateway import cli as gateway_cli
    from burstguard.report import cli as report_cli
    from burstguard.sim import cli as sim_cli
    from burstguard.workload import cli as workload_cli

    for module in (
        workload_cli,
        emulator_cli,
        sim_cli,
        bench_cli,
        calibrate_cli,
        gateway_cli,
        engines_cli,
        report_cli,
        deploy_cli,
        diagnose_cli,
    ):
        module.register(app)
    __import__("burstguard.autoscale.cli", fromlist=["register"]).register(app)
    __import__("burstguard.tune.cli", fromlist=["register"]).register(app)
    for info in app.registered_commands:
        # the root's list shows a docstring's first paragraph with its line breaks kept
        # (a summary wrapped mid-sentence); one line per command there
        doc = inspect.cleandoc(info.help or (info.callback.__doc__ if info.callback else "") or "")
        info.short_help = info.short_help or " ".join(doc.split("\n\n")[0].split())


_register_all()


def main() -> None:
    """Entry point: errors the user can fix (`BurstguardError`), and a file that cannot be
    read or written, become one line on stderr and exit code 2."""
    try:
        app()
    except BurstguardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)
    except OSError as exc:
        if exc.filename is None:  # not about a path the user named: a bug to see whole
            raise
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)


if __name__ == "__main__":
    main()
