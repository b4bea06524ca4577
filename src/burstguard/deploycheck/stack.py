"""A local stand-in for an overlay: real processes, the overlay's own config and rules.

Two `burstguard emulate` engines (vLLM's metric names), one `burstguard gateway` started
with the gateway config the overlay renders (listen addresses and backend replaced), and a
Prometheus that scrapes all three with the labels prometheus-operator would give them
(`job`, `pod`) and evaluates the overlay's PrometheusRule. `burst` drives traffic through
the gateway to the first engine and straight to the second (one backend per gateway).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from burstguard.deploycheck import expressions, manifests, prometheus
from burstguard.deploycheck.prometheus import PrometheusAPI, Target
from burstguard.errors import TargetError
from burstguard.procs import ManagedProcess, free_port

BURSTGUARD = [sys.executable, "-m", "burstguard.cli"]
GATEWAY_JOB, ENGINE_JOB = "burstguard-gateway", "vllm-engine"


@dataclass(frozen=True, slots=True)
class Stack:
    api: PrometheusAPI
    gateway_url: str
    engine_urls: tuple[str, ...]
    docs: tuple[dict[str, Any], ...]
    """The overlay's rendered manifests."""
    rules_path: Path


def gateway_config(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The gateway.yaml of the rendered burstguard-gateway-config ConfigMap."""
    for d in docs:
        name = d.get("metadata", {}).get("name", "")
        if d.get("kind") == "ConfigMap" and name.startswith("burstguard-gateway-config"):
            return dict(yaml.safe_load(d["data"]["gateway.yaml"]))
    raise TargetError("the overlay renders no burstguard-gateway-config ConfigMap")


@contextlib.contextmanager
def running(
    overlay_dir: Path, workdir: Path, *, profile: str = "llama3-8b-h100", speedup: float = 1.0,
    max_num_seqs: int = 8, scrape_interval_s: float = 1.0,
) -> Iterator[Stack]:  # fmt: skip
    """Starts the engines, the gateway and Prometheus; stops them all on exit.

    The engines are small (`max_num_seqs`) so that a short burst queues at the gateway
    and is partly shed, as a large burst would on a real engine.
    """
    docs = manifests.render(overlay_dir)
    workdir.mkdir(parents=True, exist_ok=True)
    rules_path = workdir / "rules.yaml"
    rules_path.write_text(yaml.safe_dump(expressions.rules_file(docs), sort_keys=False))
    with contextlib.ExitStack() as stack:
        engines = []
        for i in range(2):
            port = free_port()
            argv = [*BURSTGUARD, "emulate", "--profile", profile, "--host", "127.0.0.1",
                    "--port", str(port), "--speedup", str(speedup),
                    "--max-num-seqs", str(max_num_seqs)]  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            log = workdir / f"engine-{i}.log"
            stack.enter_context(ManagedProcess(argv, url + "/health", log_path=log))
            engines.append(url)
        cfg = gateway_config(docs)
        gw_port = free_port()
        cfg["listen"] = {"host": "127.0.0.1", "port": gw_port}
        cfg["backends"] = [{"url": engines[0]}]
        # the live autoscaler core (as in the fleet-predictive overlay), so that the
        # queries over its burstguard_desired_replicas are checked against real data too
        cfg.setdefault("autoscaler", {"policy": "predictive"})
        scrape_url = gw_url = f"http://127.0.0.1:{gw_port}"
        if cfg.get("metrics", {}).get("listen") is not None:  # Prometheus scrapes that port
            metrics_port = free_port()
            cfg["metrics"] = {**cfg["metrics"], "listen": {"host": "127.0.0.1",
                                                           "port": metrics_port}}  # fmt: skip
            scrape_url = f"http://127.0.0.1:{metrics_port}"
        cfg_path = workdir / "gateway.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [*BURSTGUARD, "gateway", "--config", str(cfg_path), "--log-level", "warning"]
        stack.enter_context(
            ManagedProcess(argv, gw_url + "/health", log_path=workdir / "gateway.log")
        )
        targets = [Target(GATEWAY_JOB, scrape_url.removeprefix("http://"), {"pod": "gateway-0"})]
        targets += [
            Target(ENGINE_JOB, u.removeprefix("http://"), {"pod": f"engine-{i}"})
            for i, u in enumerate(engines)
        ]
        proc, api = prometheus.start(
            workdir / "prometheus", targets, [rules_path], scrape_interval_s
        )
        stack.enter_context(proc)
        yield Stack(api, gw_url, tuple(engines), tuple(docs), rules_path)


def burst(
    stack: Stack, workdir: Path, *, duration_s: float = 20.0, rate: float = 8.0,
    burst_size: str = "60-90", idle: str = "4-6", seed: int = 0,
) -> None:  # fmt: skip
    """The seed's burst pattern through the gateway and, at half the rate, straight at the
    second engine; returns when both bench runs have finished (bounded by their timeout).
    The gateway's clients retry once within 2 s, not waiting the Retry-After (up to minutes
    for batch, which would outlast the burst): the retry series get data in the burst."""
    common = ["--pattern", "burst", "--duration", str(duration_s), "--burst-size", burst_size,
              "--idle", idle, "--seed", str(seed), "--prompt-tokens", "uniform:200-1500",
              "--output-tokens", "uniform:50-300", "--timeout", "60", "--quiet",
              "--force"]  # fmt: skip
    gateway_clients = ["--classes", "interactive=0.4,standard=0.4,batch=0.2",
                       "--retry", "exponential", "--max-retries", "1", "--retry-cap", "2",
                       "--ignore-retry-after"]  # fmt: skip
    legs = [(stack.gateway_url, rate, gateway_clients), (stack.engine_urls[1], rate / 2, [])]
    procs = []
    for i, (url, r, extra) in enumerate(legs):
        argv = [*BURSTGUARD, "bench", "--target", url, "--rate", str(r),
                "--out", str(workdir / f"bench-{i}"), *common, *extra]  # fmt: skip
        log = (workdir / f"bench-{i}.log").open("wb")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + duration_s + 120
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise TargetError(f"bench did not finish in time (logs in {workdir})") from None
        if p.returncode != 0:
            raise TargetError(f"bench exited {p.returncode} (logs in {workdir})")
