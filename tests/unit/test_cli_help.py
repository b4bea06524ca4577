"""--help a person can read: every flag name of every command whole at 80 columns."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import click
import pytest
import typer
from tests.conftest import BURSTGUARD
from typer.testing import CliRunner

from burstguard.cli import app

RUNNER = CliRunner()


def commands() -> Iterator[tuple[list[str], click.Command]]:
    """(path, command) for the root and every command and subcommand under it."""

    def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = list(commands())


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "root" for p, _ in COMMANDS])
def test_every_flag_name_prints_whole_at_80_columns(path: list[str], cmd: click.Command) -> None:
    """And nothing else is cut: rich ends a cell too narrow for one word (a metavar, a
    default URL) with an ellipsis."""
    result = RUNNER.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert [line for line in lines if "\u2026" in line] == []
    words = {w for line in lines for token in line.replace("│", " ").split()
             for w in token.split(",")}  # fmt: skip
    names = [o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    assert [n for n in names if n not in words] == []


def test_engine_switches_fold_into_one_value() -> None:
    """`--no-enable-chunked-prefill` turns it off (a token budget below the model length is
    then refused), the default stays on, and naming both is refused (exit 2)."""
    base = [*BURSTGUARD, "sim", "--pattern", "constant", "--rate", "2", "--duration", "1",
            "--profile", "instant", "--max-model-len", "2048",
            "--max-num-batched-tokens", "512"]  # fmt: skip

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60)

    assert run().returncode == 0
    off = run("--no-enable-chunked-prefill")
    assert off.returncode == 2 and "chunked prefill off" in off.stderr, off.stderr
    both = run("--enable-chunked-prefill", "--no-enable-chunked-prefill")
    assert both.returncode == 2 and "contradict each other" in both.stderr, both.stderr


def test_the_readme_command_table_lists_every_command() -> None:
    """Each top-level command (and `diagnose`, the seed's troubleshooting order) has a row."""
    from tests.conftest import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Commands") :]
    rows = [line for line in table.splitlines() if line.startswith("| `burstguard ")]
    listed = {row.split()[2].rstrip("`") for row in rows}
    top = {name for path, _ in COMMANDS if len(path) == 1 for name in path}
    assert sorted((top | {"diagnose"}) - listed) == []


def test_every_option_and_argument_says_what_it_is() -> None:
    """A flag listed with only its type and default (`fleet --min-replicas`, `engines
    install --python` were) tells a new user nothing."""
    bare = [(" ".join(path), p.name) for path, cmd in COMMANDS for p in cmd.params
            if p.name != "help" and not (getattr(p, "help", None) or "").strip()]  # fmt: skip
    assert bare == []


def test_the_root_lists_each_command_summary_unbroken() -> None:
    """On a wide terminal each summary is one line: the docstrings' own line breaks showed
    (`sim  Simulate one engine (or, ... replicas behind the` / `gateway's router) ...`)."""
    result = RUNNER.invoke(app, ["--help"], env={"COLUMNS": "300"})
    rows = {line.split()[1]: line for line in result.output.splitlines()
            if line.startswith("│ ") and len(line.split()) > 2}  # fmt: skip
    assert "gateway's router) on a workload" in rows["sim"]
    assert "the fix." in rows["diagnose"] and "simulated cold start." in rows["fleet"]
