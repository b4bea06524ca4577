"""deploy/ renders with `kubectl kustomize`, every object validates against the Kubernetes
schemas and the vendored CRDs, every expression lints clean, and the configs it ships
are configs burstguard accepts."""

from __future__ import annotations

import copy
import inspect
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import BURSTGUARD
from tests.integration.deploy_tools import DEPLOY, require

from burstguard.core.fleet.config import FleetConfig
from burstguard.core.gateway.config import GatewayConfig
from burstguard.core.scaling.config import load_policy
from burstguard.core.scaling.export import ExportTarget
from burstguard.core.scaling.export import render as render_policy
from burstguard.deploycheck import catalogue, manifests, tree
from burstguard.deploycheck.stack import gateway_config
from burstguard.http.server import HttpServer
from burstguard.live.gateway.cli import load_config
from burstguard.live.gateway.metrics import _TTFT_BUCKETS


@pytest.fixture(scope="module")
def checked() -> tree.TreeCheck:
    require("kubectl")
    return tree.check_tree(DEPLOY, catalogue.load())


def objects(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_every_overlay_renders_validates_and_lints_clean(checked: tree.TreeCheck) -> None:
    assert set(checked.rendered) == {"single-engine", "fleet-keda", "fleet-predictive", "epp"}
    assert checked.problems == []
    kinds = {name: {d["kind"] for d in docs} for name, docs in checked.rendered.items()}
    common = {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "ServiceMonitor",
              "PodMonitor", "PrometheusRule"}  # fmt: skip
    assert all(common <= k for k in kinds.values())
    assert "ScaledObject" not in kinds["single-engine"]
    assert "ScaledObject" in kinds["fleet-keda"] and "ScaledObject" in kinds["fleet-predictive"]
    fleet = checked.rendered["fleet-keda"]
    assert {d["metadata"]["name"] for d in objects(fleet, "Deployment")} >= {"redis"}
    # every source of expressions was found
    assert {e.kind for e in checked.expressions} == {"keda", "record", "alert", "panel"}
    assert checked.scrape_interval_s == 5.0


def test_validation_catches_typos_and_wrong_types(checked: tree.TreeCheck) -> None:
    crds = manifests.CrdSchemas.from_dir(DEPLOY / "crds")
    docs = checked.rendered["fleet-keda"]
    gateway = next(
        d for d in objects(docs, "Deployment") if d["metadata"]["name"] == "burstguard-gateway"
    )
    scaled = objects(docs, "ScaledObject")[0]
    rule = objects(docs, "PrometheusRule")[0]
    monitor = objects(docs, "ServiceMonitor")[0]
    bad = [copy.deepcopy(d) for d in (gateway, gateway, scaled, scaled, rule, monitor)]
    bad[0]["spec"]["replica"] = 2
    bad[1]["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    bad[2]["spec"]["minReplicas"] = 1
    bad[3]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] = "300"  # fmt: skip
    bad[4]["spec"]["groups"][0]["rules"][0]["recrod"] = "x"
    bad[5]["spec"]["endpoints"][0]["intervall"] = "5s"
    for doc in bad:
        assert manifests.validate(doc, crds), doc["kind"]
    unknown = {"apiVersion": "keda.sh/v1alpha2", "kind": "ScaledObject", "metadata": {"name": "x"}}
    assert "no vendored CRD schema" in manifests.validate(unknown, crds)[0]


def _seeded_tree(tmp_path: Path, old: str, new: str, file: str) -> Path:
    copy_dir = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy_dir)
    path = copy_dir / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return copy_dir


KEDA_QUEUE = "components/keda-queue/scaledobject.yaml"
QUEUE_TRIGGER = "sum(max_over_time(llm_request_queue_depth[1m]))"


@pytest.mark.parametrize(
    ("file", "old", "new", "rule"),
    [
        (KEDA_QUEUE, QUEUE_TRIGGER, "sum(rate(llm_request_queue_depth[1m]))",
         "counter-function-on-gauge"),
        (KEDA_QUEUE, "sum(rate(burstguard_arrivals_total[1m]))",
         "sum(rate(llm_request_total[10s]))", "range-too-short"),
        (KEDA_QUEUE, QUEUE_TRIGGER, "sum by (class) (llm_request_queue_depth)",
         "keda-several-series"),
        ("base/monitoring/dashboards/burstguard.json", "max by (pod) (vllm:kv_cache_usage_perc)",
         "max by (pod) (vllm:gpu_cache_usage_perc)", "removed-metric"),
    ],
)  # fmt: skip
def test_the_check_refuses_the_seeds_mistakes(
    tmp_path: Path, file: str, old: str, new: str, rule: str
) -> None:
    bad = _seeded_tree(tmp_path, old, new, file)
    problems = tree.check_tree(bad, catalogue.load()).problems
    assert len(problems) == 1 and f": {rule}: " in problems[0], problems


def test_deploy_check_command_exits_1_on_a_problem_and_0_on_deploy(tmp_path: Path) -> None:
    bad = _seeded_tree(
        tmp_path, "max by (pod) (vllm:kv_cache_usage_perc)",
        "max by (pod) (vllm:gpu_cache_usage_perc)", "base/monitoring/dashboards/burstguard.json",
    )  # fmt: skip
    proc = subprocess.run(
        [*BURSTGUARD, "deploy", "check", "--deploy-dir", str(bad)], capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ": removed-metric: " in proc.stderr and "vllm:kv_cache_usage_perc" in proc.stderr
    ok = subprocess.run(
        [*BURSTGUARD, "deploy", "check", "--deploy-dir", str(DEPLOY)], capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip().endswith("ok"), ok.stderr


def test_deploy_check_bad_directory_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*BURSTGUARD, "deploy", "check", "--deploy-dir", str(tmp_path)], capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "has no overlays/ folder" in proc.stderr and "Traceback" not in proc.stderr


def test_deploy_snapshot_bad_overlay_is_a_clear_error(tmp_path: Path) -> None:
    argv = [*BURSTGUARD, "deploy", "snapshot", "--deploy-dir", str(DEPLOY), "--overlay", "nope",
            "--out", str(tmp_path / "x.png")]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--overlay:" in proc.stderr and "nope does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gateway_configs_are_configs_the_gateway_accepts(
    checked: tree.TreeCheck, tmp_path: Path
) -> None:
    single = gateway_config(checked.rendered["single-engine"])
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(single))
    cfg = load_config(path, None, None, None)  # what `burstguard gateway --config` does
    assert cfg.backends[0].url == "http://vllm-engine:8000"
    assert cfg.listen.host == "0.0.0.0"
    for name in ("fleet-keda", "fleet-predictive"):
        # the whole config, fleet: and autoscaler: included, as the gateway reads it
        GatewayConfig.from_dict(gateway_config(checked.rendered[name]))
    fleet_block = FleetConfig.model_validate(
        gateway_config(checked.rendered["fleet-keda"])["fleet"]
    )
    assert fleet_block.discovery.dns is not None and fleet_block.discovery.dns.name == "vllm-engine"
    assert fleet_block.redis.replicas == 2


def test_prometheus_scrapes_the_gateways_metrics_listener(checked: tree.TreeCheck) -> None:
    """ServiceMonitor port -> Service port -> container port = `metrics.listen`, a port
    clients are not routed to (the gateway's own port then serves no /metrics)."""
    for name in ("single-engine", "fleet-keda", "fleet-predictive"):
        docs = checked.rendered[name]
        cfg = GatewayConfig.from_dict(gateway_config(docs))
        assert cfg.metrics.listen is not None and cfg.metrics.listen.port != cfg.listen.port
        monitor = objects(docs, "ServiceMonitor")[0]["spec"]["endpoints"][0]
        service = next(d for d in objects(docs, "Service")
                       if d["metadata"]["name"] == "burstguard-gateway")  # fmt: skip
        port = {p["name"]: p for p in service["spec"]["ports"]}[monitor["port"]]
        gw = next(d for d in objects(docs, "Deployment")
                  if d["metadata"]["name"] == "burstguard-gateway")  # fmt: skip
        container = {p["name"]: p["containerPort"]
                     for p in gw["spec"]["template"]["spec"]["containers"][0]["ports"]}  # fmt: skip
        assert container[port["targetPort"]] == cfg.metrics.listen.port, name
        assert monitor["path"] == "/metrics"


def test_slo_rules_use_the_configs_targets_and_real_bucket_bounds(checked: tree.TreeCheck) -> None:
    cfg = GatewayConfig.from_dict(gateway_config(checked.rendered["single-engine"]))
    targets = {c.name: c.ttft_target_s for c in cfg.classes if c.ttft_target_s}
    slo = [e for e in checked.expressions if e.record and "ttft_slo_errors" in e.record]
    assert len(slo) == 6  # 5m 30m 1h 2h 6h 1d
    for e in slo:
        pairs = re.findall(r'class="(\w+)", le="([\d.]+)"', e.expr)
        assert {c: float(le) for c, le in pairs} == targets
        assert all(float(le) in _TTFT_BUCKETS for _, le in pairs)


def test_graceful_stop_fits_the_grace_period(checked: tree.TreeCheck) -> None:
    drain_s = inspect.signature(HttpServer.serve).parameters["drain_s"].default
    for name, docs in checked.rendered.items():
        if name == "epp":  # no standalone gateway there (test_the_epp_overlay_hangs_together)
            continue
        gw = next(
            d for d in objects(docs, "Deployment") if d["metadata"]["name"] == "burstguard-gateway"
        )
        pod = gw["spec"]["template"]["spec"]
        container = pod["containers"][0]
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pod["terminationGracePeriodSeconds"] >= pre_stop + drain_s
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"


def test_the_epp_overlay_hangs_together(checked: tree.TreeCheck) -> None:
    """Gateway -> HTTPRoute -> InferencePool -> the picker's Service and port -> the picker,
    which discovers the pool's pods through the engines' headless Service, exports the
    gateway's metric names to the ServiceMonitor the rules read, and runs without
    preemption (EPP mode); the pool is checked against GAIE's vendored v1 CRD, so a typo in it
    is caught offline."""
    from burstguard.core.gateway.epp import epp_config

    docs = checked.rendered["epp"]
    deployments = {d["metadata"]["name"]: d for d in objects(docs, "Deployment")}
    assert "burstguard-gateway" not in deployments
    picker = deployments["burstguard-epp"]["spec"]["template"]["spec"]["containers"][0]
    assert picker["args"][0] == "epp"
    assert {picker["readinessProbe"]["grpc"]["service"],
            picker["livenessProbe"]["grpc"]["service"]} == {"readiness", "liveness"}  # fmt: skip
    services = {d["metadata"]["name"]: d for d in objects(docs, "Service")}
    pool = objects(docs, "InferencePool")[0]
    route = objects(docs, "HTTPRoute")[0]
    assert route["spec"]["rules"][0]["backendRefs"][0] == {
        "group": "inference.networking.k8s.io", "kind": "InferencePool",
        "name": pool["metadata"]["name"]}  # fmt: skip
    ref = pool["spec"]["endpointPickerRef"]
    grpc_port = {p["name"]: p["port"] for p in services[ref["name"]]["spec"]["ports"]}["grpc"]
    cfg = GatewayConfig.from_dict(gateway_config(docs))
    assert ref["port"]["number"] == grpc_port == cfg.epp.grpc_port
    engines = services["vllm-engine"]["spec"]
    assert cfg.fleet.discovery.dns is not None and cfg.fleet.discovery.dns.name == "vllm-engine"
    assert engines["selector"] == pool["spec"]["selector"]["matchLabels"]
    assert pool["spec"]["targetPorts"][0]["number"] == engines["ports"][0]["port"]
    monitor = objects(docs, "ServiceMonitor")[0]["spec"]
    labels = services["burstguard-epp"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    metrics_port = {p["name"]: p["port"] for p in services["burstguard-epp"]["spec"]["ports"]}
    assert metrics_port[monitor["endpoints"][0]["port"]] == cfg.epp.metrics_port
    assert epp_config(cfg)[1] == []  # nothing in it needs turning off
    bad = copy.deepcopy(pool)
    bad["spec"]["endpointPickerRef"]["failuremode"] = "FailOpen"
    crds = manifests.CrdSchemas.from_dir(DEPLOY / "crds")
    assert manifests.validate(bad, crds) != []
    # checked against GAIE's own v1 CRD (vendored), not a partial schema: its status, and
    # up to 8 target ports
    schema = crds.get(pool)
    assert schema is not None and "parents" in schema["properties"]["status"]["properties"]
    ports = copy.deepcopy(pool)
    ports["spec"]["targetPorts"] = [{"number": 8000 + i} for i in range(8)]
    assert manifests.validate(ports, crds) == []
    ports["spec"]["targetPorts"].append({"number": 9000})
    assert manifests.validate(ports, crds) != []


@pytest.mark.parametrize(
    ("preset", "component"),
    [("keda-queue", "keda-queue"), ("keda-rate", "keda-queue"), ("predictive", "predictive")],
)
def test_an_exported_policy_drops_in(tmp_path: Path, preset: str, component: str) -> None:
    """`burstguard scaling export` output replaces a component's ScaledObject and the tree
    still renders, validates and lints clean."""
    tree_copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, tree_copy)
    target = ExportTarget("vllm-engine", "llm-serving")
    exported = render_policy(load_policy(preset), target)["scaledobject.yaml"]
    path = tree_copy / "components" / component / "scaledobject.yaml"
    path.write_text(yaml.safe_dump(exported, sort_keys=False))
    checked = tree.check_tree(tree_copy, catalogue.load())
    assert checked.problems == []
    overlay = "fleet-predictive" if component == "predictive" else "fleet-keda"
    so = objects(checked.rendered[overlay], "ScaledObject")[0]
    assert so["spec"]["triggers"] == exported["spec"]["triggers"]


def test_scaled_objects_follow_the_seed(checked: tree.TreeCheck) -> None:
    for name in ("fleet-keda", "fleet-predictive"):
        so = objects(checked.rendered[name], "ScaledObject")[0]["spec"]
        down = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        assert 120 <= down["stabilizationWindowSeconds"] <= 300  # the seed's 2-5 min
        assert so["minReplicaCount"] >= 1
        assert so["scaleTargetRef"]["name"] == "vllm-engine"
        assert all(t["type"] == "prometheus" for t in so["triggers"])
    triggers = objects(checked.rendered["fleet-predictive"], "ScaledObject")[0]["spec"]["triggers"]
    assert [t["metadata"]["query"] for t in triggers] == ["max(burstguard_desired_replicas)"]
