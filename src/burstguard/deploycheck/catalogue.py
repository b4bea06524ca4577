"""The metric catalogue (metrics.yaml): names, types, exporters, removed vLLM names."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml

MetricType = Literal["counter", "gauge", "histogram"]
Source = Literal["gateway", "engine", "vllm", "external", "pending"]
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
LIVE_SOURCES: frozenset[str] = frozenset({"gateway", "engine"})
"""Exported by the processes the local test runs: their series must have data there."""


@dataclass(frozen=True, slots=True)
class MetricInfo:
    name: str
    type: MetricType
    source: Source
    note: str = ""


@dataclass(frozen=True, slots=True)
class Catalogue:
    metrics: dict[str, MetricInfo]
    removed: dict[str, str]
    vllm_version: str

    def lookup(self, series: str) -> tuple[MetricInfo, str] | None:
        """(the metric, the series' sample type) for a series name, or None if unknown.

        `foo_bucket` of a histogram `foo` is a counter series; `foo` itself is its type.
        """
        if series in self.metrics:
            info = self.metrics[series]
            return info, info.type
        for suffix in HISTOGRAM_SUFFIXES:
            base = series.removesuffix(suffix)
            if base != series and self.metrics.get(base, None) is not None:
                info = self.metrics[base]
                if info.type == "histogram":
                    return info, "counter"
        return None


@cache
def load() -> Catalogue:
    """The catalogue shipped with burstguard."""
    text = resources.files("burstguard.deploycheck").joinpath("metrics.yaml").read_text()
    data = yaml.safe_load(text)
    metrics = {
        name: MetricInfo(name, spec["type"], spec["source"], spec.get("note", ""))
        for name, spec in data["metrics"].items()
    }
    return Catalogue(metrics, dict(data["removed"]), str(data["vllm_version"]))
