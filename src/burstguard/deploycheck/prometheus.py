"""A local Prometheus (the Debian `prometheus` binary) and the parts of its HTTP API we use.

The local process stands in for the cluster's Prometheus: it scrapes real burstguard
processes on 127.0.0.1 with the labels the ServiceMonitor/PodMonitor would give them
(`job`, `pod`), and evaluates deploy/'s own rules.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from burstguard.errors import TargetError
from burstguard.procs import ManagedProcess, free_port


@dataclass(frozen=True, slots=True)
class Target:
    """One scrape target: `host:port`, its job and extra labels (e.g. pod)."""

    job: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


def config(targets: Sequence[Target], rule_files: Sequence[Path], interval_s: float) -> dict:
    """A prometheus.yml scraping `targets` every `interval_s` and evaluating the rules."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": dict(t.labels)})
    interval = f"{interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": static} for job, static in jobs.items()
        ],
    }


def binary(name: str = "prometheus") -> str:
    path = shutil.which(name)
    if path is None:
        raise TargetError(
            f"{name} not found: install the Debian package `prometheus` (make system-deps)"
        )
    return path


def start(
    workdir: Path, targets: Sequence[Target], rule_files: Sequence[Path], interval_s: float = 1.0
) -> tuple[ManagedProcess, PrometheusAPI]:
    """Starts Prometheus on a free port; the caller stops the process (or uses `with`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config(targets, rule_files, interval_s), sort_keys=False))
    port = free_port()
    argv = [
        binary(),
        f"--config.file={cfg}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
        "--log.level=warn",
    ]
    base = f"http://127.0.0.1:{port}"
    proc = ManagedProcess(argv, base + "/-/ready", log_path=workdir / "prometheus.log")
    return proc, PrometheusAPI(base)


class PromQLError(Exception):
    """Prometheus refused a query (bad syntax, bad types): its own message."""


class PrometheusAPI:
    """Instant and range queries, metadata and targets over Prometheus' HTTP API."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise PromQLError(body.get("error", f"HTTP {exc.code}")) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise TargetError(f"cannot reach Prometheus at {self.base}: {exc}") from exc
        if body.get("status") != "success":
            raise PromQLError(body.get("error", "query failed"))
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> tuple[str, list[dict[str, Any]]]:
        """(resultType, result) of an instant query."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._get("/api/v1/query", **params)
        result = data["result"]
        return data["resultType"], result if isinstance(result, list) else [result]

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict]:
        data = self._get(
            "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
            step=f"{step_s:g}",
        )  # fmt: skip
        return list(data["result"])

    def metadata(self) -> dict[str, str]:
        """Metric family name -> type, as the scraped exporters declared it."""
        data = self._get("/api/v1/metadata")
        return {name: entries[0]["type"] for name, entries in data.items() if entries}

    def targets_up(self) -> dict[str, bool]:
        """scrapeUrl -> whether its last scrape succeeded."""
        data = self._get("/api/v1/targets", state="active")
        return {t["scrapeUrl"]: t["health"] == "up" for t in data["activeTargets"]}
