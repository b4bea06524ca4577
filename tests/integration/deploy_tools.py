"""What the deploy/ tests share: the tree's path and the external tools they need."""

from __future__ import annotations

import os
import shutil

import pytest
from tests.conftest import REPO_ROOT

from burstguard.deploycheck.manifests import find_kubectl

DEPLOY = REPO_ROOT / "deploy"


def require(tool: str) -> str:
    """The tool's path; skipped outside CI when missing, a failure in CI (`make test`
    installs kubectl, prometheus and promtool first)."""
    path = find_kubectl() if tool == "kubectl" else shutil.which(tool)
    if path is not None:
        return path
    how = "make kubectl" if tool == "kubectl" else "make system-deps (Debian prometheus)"
    if os.environ.get("CI"):
        pytest.fail(f"{tool} is missing: {how}")
    pytest.skip(f"{tool} is missing: {how}")
