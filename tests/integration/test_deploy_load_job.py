"""deploy/load: the Indexed Job that sends one schedule from N pods renders, validates
against the Kubernetes schemas, runs as many pods as shards, and its command line is one
`burstguard bench` accepts."""

from __future__ import annotations

import re
import shlex

import typer
from tests.integration.deploy_tools import DEPLOY, require

from burstguard.cli import app
from burstguard.deploycheck import manifests


def test_the_load_job_renders_validates_and_names_real_flags() -> None:
    require("kubectl")
    docs = manifests.render(DEPLOY / "load")
    crds = manifests.CrdSchemas.from_dir(DEPLOY / "crds")
    assert [p for d in docs for p in manifests.validate(d, crds)] == []
    job = next(d for d in docs if d["kind"] == "Job")
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(config["SHARDS"])
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    words = shlex.split(script.replace("$LOAD", config["LOAD"]))
    assert words[:3] == ["exec", "burstguard", "bench"]
    assert "--shard" in words and "--start-at" in words
    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    known = {o for p in bench.params for o in (*p.opts, *p.secondary_opts)}
    assert [w for w in words if re.fullmatch(r"--[a-z-]+", w) and w not in known] == []
