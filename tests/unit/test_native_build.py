"""The mypyc build (setup.py, `make compiled`) is what `make test` runs: every module
setup.py compiles must then be imported from its extension, not from its .py."""

from __future__ import annotations

import importlib
import os
import re

import pytest
from tests.conftest import REPO_ROOT


def compiled_modules() -> list[str]:
    text = (REPO_ROOT / "setup.py").read_text()
    return [p.replace("/", ".") for p in re.findall(r'"src/(burstguard/[\w/]+)\.py"', text)]


@pytest.mark.skipif(
    os.environ.get("BURSTGUARD_NATIVE") != "1", reason="BURSTGUARD_NATIVE=1 (make test) asks for it"
)
def test_the_hot_modules_run_compiled() -> None:
    names = compiled_modules()
    assert len(names) >= 20 and "burstguard.sim.loop" in names
    plain = [n for n in names if not importlib.import_module(n).__file__.endswith(".so")]  # type: ignore[union-attr]
    assert not plain, f"imported as plain Python (run `make compiled`): {plain}"
