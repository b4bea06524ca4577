"""`burstguard scaling export`: manifests with the right structure, valid against KEDA's CRD."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from burstguard.autoscale import PRESETS, load_policy
from burstguard.errors import BurstguardError

CRD = Path(__file__).parents[2] / "deploy" / "crds" / "keda.sh_scaledobjects.yaml"


def scaledobject_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def export(policy: str, out: Path, *args: str) -> int:
    """Runs `burstguard scaling export` in process; returns the exit code."""
    from typer.testing import CliRunner

    from burstguard.cli import app

    result = CliRunner().invoke(app, ["scaling", "export", policy, "--out", str(out), *args])
    if isinstance(result.exception, BurstguardError):
        return result.exception.exit_code
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code


def test_every_keda_export_validates_against_the_crd(tmp_path: Path) -> None:
    schema = scaledobject_schema()
    validator = jsonschema.Draft7Validator(schema)
    for name in PRESETS:
        if load_policy(name).kind == "kpa":
            continue
        assert export(name, tmp_path / name) == 0
        doc = yaml.safe_load((tmp_path / name / "scaledobject.yaml").read_text())
        errors = [e.message for e in validator.iter_errors(doc)]
        assert errors == [], f"{name}: {errors}"


def test_the_schema_catches_a_broken_scaledobject(tmp_path: Path) -> None:
    """The validation is not vacuous: a wrong type in the behavior fails it."""
    export("keda-queue", tmp_path)
    doc = yaml.safe_load((tmp_path / "scaledobject.yaml").read_text())
    doc["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"][
        "stabilizationWindowSeconds"
    ] = "five"
    del doc["spec"]["scaleTargetRef"]["name"]
    assert len(list(jsonschema.Draft7Validator(scaledobject_schema()).iter_errors(doc))) == 2


def test_keda_queue_structure(tmp_path: Path) -> None:
    assert export("keda-queue", tmp_path, "--name", "vllm", "--max-replicas", "12") == 0
    spec = yaml.safe_load((tmp_path / "scaledobject.yaml").read_text())["spec"]
    assert spec["scaleTargetRef"]["name"] == "vllm"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 12)
    assert (spec["pollingInterval"], spec["cooldownPeriod"]) == (30, 300)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert behavior["scaleUp"]["policies"] == [
        {"type": "Percent", "value": 100, "periodSeconds": 15},
        {"type": "Pods", "value": 4, "periodSeconds": 15},
    ]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["query"] == "max_over_time(sum(llm_request_queue_depth)[1m:15s])"
    assert (meta["threshold"], meta["activationThreshold"]) == ("5", "0")


def test_keda_rate_and_predictive_queries(tmp_path: Path) -> None:
    export("keda-rate", tmp_path / "rate")
    rate = yaml.safe_load((tmp_path / "rate" / "scaledobject.yaml").read_text())
    assert rate["spec"]["triggers"][0]["metadata"]["query"] == (
        "sum(rate(burstguard_arrivals_total[1m]))"
    )
    export("predictive", tmp_path / "pred")
    pred = yaml.safe_load((tmp_path / "pred" / "scaledobject.yaml").read_text())["spec"]
    meta = pred["triggers"][0]["metadata"]
    assert meta["query"] == "max(burstguard_desired_replicas)" and meta["threshold"] == "1"
    behavior = pred["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    for direction in ("scaleUp", "scaleDown"):  # the HPA obeys burstguard's count
        assert behavior[direction]["stabilizationWindowSeconds"] == 0
        assert behavior[direction]["tolerance"] == "0"


def test_kpa_exports_knative_annotations(tmp_path: Path) -> None:
    assert export("kpa", tmp_path) == 0
    svc = yaml.safe_load((tmp_path / "knative-service.yaml").read_text())
    ann = svc["spec"]["template"]["metadata"]["annotations"]
    assert ann["autoscaling.knative.dev/window"] == "60s"
    assert ann["autoscaling.knative.dev/panic-window-percentage"] == "10"
    assert ann["autoscaling.knative.dev/panic-threshold-percentage"] == "200"


def test_bad_policy_files_are_one_line_errors(tmp_path: Path) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(
        "kind: keda\nkeda:\n  target: 50\n"
        "  query: {metric: llm_request_queue_depth, function: rate, window_s: 60}\n"
    )
    cmd = ["scaling", "export", str(seed), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "burstguard.cli", *cmd], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "rate() is for counters only" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(BurstguardError, match="no such preset"):
        load_policy("keda-nope")
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("kind: kpa\nkeda: {query: {metric: llm_request_queue_depth}, target: 5}\n")
    with pytest.raises(BurstguardError, match="needs exactly a `kpa:` block"):
        load_policy(mixed)


def test_show_prints_a_file_that_loads(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from burstguard.cli import app

    result = CliRunner().invoke(app, ["scaling", "show", "kpa"])
    assert result.exit_code == 0
    (tmp_path / "kpa.yaml").write_text(result.output)
    assert load_policy(tmp_path / "kpa.yaml") == load_policy("kpa")


def test_a_policy_written_back_reads_the_same(tmp_path: Path) -> None:
    for name in PRESETS:
        tuned = load_policy(name).with_overrides(min_replicas=2, max_replicas=5, cold_start_s=45)
        path = tmp_path / f"{name}.yaml"
        path.write_text(tuned.to_yaml())
        assert load_policy(path) == tuned
        assert load_policy(path).cold_start_model.mean_s == 45


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--name", "Bad Name!"), "--name 'Bad Name!': a Kubernetes name"),
        (("--name", "a" * 64), "a Kubernetes name is 1-63"),
        (("--namespace", ""), "--namespace '': a Kubernetes name"),
        (("--prometheus", "not a url"), "--prometheus: 'not a url' is not an http"),
    ],
)
def test_names_and_the_prometheus_url_kubectl_would_refuse_are_refused(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    """They were written into the manifests as given (exit 0), for `kubectl apply` to
    refuse later."""
    from typer.testing import CliRunner

    from burstguard.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["scaling", "export", "keda-queue", "--out", str(out), *args])
    assert isinstance(result.exception, BurstguardError) and needle in str(result.exception)
    assert not out.exists()
