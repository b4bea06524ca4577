"""The emulator's /metrics: vLLM's metric names and meaning, labelled `model_name`.

Anything that scrapes vLLM (the gateway, KEDA, Grafana) works against the emulator
unchanged. Gauges and token counters are read from the engine core at scrape time;
latency histograms are observed by the driver in engine time (wall time x speedup).
Bucket bounds follow vLLM's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from burstguard.engine.core import EngineStats

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# vLLM's `vllm:iteration_tokens_total` buckets: tokens computed by one engine step
STEP_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _EngineStatsCollector(Collector):
    """Gauges and counters that mirror the engine core's own stats at scrape time."""

    def __init__(self, model_name: str, stats: Callable[[], EngineStats]) -> None:
        self._model_name = model_name
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        label = [self._model_name]
        gauges = (
            ("vllm:num_requests_running", "Requests in model execution batches.", s.num_running),
            ("vllm:num_requests_waiting", "Requests waiting to be processed.", s.num_waiting),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                s.kv_cache_usage,
            ),
        )
        for name, doc, value in gauges:
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(label, float(value))
            yield family
        counters = (
            (
                "vllm:num_preemptions",
                "Cumulative number of preemptions from the engine.",
                s.num_preemptions_total,
            ),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            ),
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_cache_queries_total,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_cache_hits_total,
            ),
        )
        for name, doc, value in counters:
            counter = CounterMetricFamily(name, doc, labels=["model_name"])
            counter.add_metric(label, float(value))
            yield counter


class EmulatorMetrics:
    """One registry per server; children bound to the served model name once."""

    def __init__(self, model_name: str, stats: Callable[[], EngineStats]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineStatsCollector(model_name, stats))
        labels = ["model_name"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

        self.ttft = hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        ).labels(model_name)
        self.itl = hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        ).labels(model_name)
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            REQUEST_BUCKETS,
        ).labels(model_name)
        self.queue_time = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_BUCKETS,
        ).labels(model_name)
        self.step_tokens = hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            STEP_TOKEN_BUCKETS,
        ).labels(model_name)
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self._model_name = model_name
        self.aborted = Counter(
            "burstguard_emulator_aborted_requests",
            "Requests aborted because their client went away (their KV blocks freed).",
            labels,
            registry=self.registry,
        ).labels(model_name)

        self.lag = hist(
            "burstguard_emulator_lag_seconds",
            "Engine seconds by which a step's tokens reached the clients later than "
            "wall time x speedup said they should: the host not keeping up with --speedup.",
            LAG_BUCKETS,
        ).labels(model_name)

    def request_success(self, finished_reason: str) -> None:
        self._success.labels(self._model_name, finished_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
