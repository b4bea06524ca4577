"""The fleet's settings: discovery, health, routing, failover budget, shared state.

Validated like the rest of the gateway config (pydantic, errors naming the field); meant to
sit under a `fleet:` key of `GatewayConfig`. Defaults are argued in docs/gateway.md.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from burstguard.errors import ConfigError
from burstguard.wire.urls import normalize_backend_url


class _Strict(BaseModel):
    # YAML reads .inf and .nan as floats: no setting here means either (an infinite
    # interval or timeout stalls the loop that uses it, or crashes it converting to int)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BackendOptions(_Strict):
    """How the gateway talks to one engine: a static `backends` entry's settings, and
    `fleet.discovery.options` for every discovered backend (the core reads the preemption
    and priority switches per backend from these, so discovered ones get them too)."""

    tokenizer: str = Field(
        "auto", min_length=1, description="prompt token counting: auto (a request for the "
        "reference model: its tokenizer where installed; else the estimate), estimate, or a "
        "tokenizer.json path",
    )  # fmt: skip
    connect_timeout_s: float = Field(5.0, gt=0, description="TCP connect timeout")
    read_timeout_s: float = Field(
        600.0, gt=0, description="longest silence from the backend (headers or between chunks)"
    )
    forward_priority: bool = Field(
        False,
        description="send the class rank as vLLM's `priority` (the engine must run "
        "--scheduling-policy priority: vLLM refuses a non-zero priority otherwise)",
    )
    resume: bool = Field(
        False,
        description="the backend continues a text it is given (vLLM, the emulator: completions "
        "prompt + text so far, chat `continue_final_message`): the gateway may preempt",
    )


class DnsDiscovery(_Strict):
    """A DNS name re-resolved to all its addresses (a Kubernetes headless Service)."""

    name: str = Field(min_length=1, description="host name, e.g. vllm.ns.svc.cluster.local")
    port: int = Field(ge=1, le=65535, description="the engines' port")
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(5.0, gt=0, description="re-resolve this often")

    @field_validator("name")
    @classmethod
    def _host_name(cls, name: str) -> str:
        try:  # an empty or over-long label is a UnicodeError from the resolver, not OSError
            name.encode("idna")
        except UnicodeError as exc:
            raise ValueError(f"not a host name ({exc})") from None
        return name


class FileDiscovery(_Strict):
    """A file listing backend URLs, one per line (`#` comments), re-read when it changes."""

    path: str = Field(min_length=1)
    interval_s: float = Field(1.0, gt=0, description="check the file this often")


class DiscoveryConfig(_Strict):
    """Backends beyond the static `backends` list; all sources are merged."""

    dns: DnsDiscovery | None = None
    file: FileDiscovery | None = None
    options: BackendOptions | None = Field(
        None, description="settings of every discovered backend (None: the first `backends` "
        "entry's, or the defaults)",
    )  # fmt: skip


class HealthConfig(_Strict):
    """Active /health probes, passive failures and the circuit breaker."""

    failure_threshold: int = Field(3, ge=1, description="failures in a row that open it")
    open_s: float = Field(0.5, gt=0, description="open this long before half-open trials")
    success_threshold: int = Field(2, ge=1, description="half-open successes that close it")
    half_open_requests: bool = Field(
        False, description="half-open: also one trial request at a time (default: probes only)"
    )
    probe_interval_s: float = Field(0.25, gt=0, description="active /health probe period")
    probe_timeout_s: float = Field(0.5, gt=0)
    probe_path: str = "/health"
    metrics_stale_s: float = Field(
        2.0, gt=0, description="older metrics count as saturated (llm-d's staleness bound)"
    )
    max_outage_wait_s: float = Field(
        10.0, gt=0, description="once every known backend has been unhealthy this long, the "
        "queue stops waiting for one: queued and new requests get 429 no_backend with a "
        "Retry-After until one is healthy (a class without queue_deadline_s would otherwise "
        "wait forever); no backend known at all (scaling from zero) is not an outage",
    )  # fmt: skip


class RouterConfig(_Strict):
    """Which backend a released request goes to (see `fleet.router`)."""

    policy: Literal["score", "round_robin", "least_request"] = "score"
    saturated_waiting: int = Field(5, ge=1, description="engine waiting count that saturates")
    saturated_kv: float = Field(0.8, gt=0, le=1, description="engine KV usage that saturates")
    kv_floor: float = Field(0.05, gt=0, le=1, description="smallest free-KV share divided by")
    speed_weight: float = Field(
        0.1, ge=0, le=1, description="score: weight of each completed stream's time per "
        "output token in its backend's learned pace (exponential average; 0: never learn, "
        "all alike)",
    )  # fmt: skip
    affinity: bool = Field(False, description="prefix affinity by bounded-load hashing")
    affinity_blocks: int = Field(4, ge=1, description="leading prompt blocks forming the key")
    block_tokens: int = Field(16, ge=1, description="tokens per prefix block")
    affinity_load_factor: float = Field(
        1.25, ge=1, description="a replica takes at most this x the mean in-flight load"
    )
    ring_points: int = Field(64, ge=1, description="points per backend on the hash ring")


class RetryBudgetConfig(_Strict):
    """Failover retries allowed (Envoy's retry_budget, over a window)."""

    ratio: float = Field(0.2, ge=0, le=1, description="retries per request over the window")
    window_s: float = Field(10.0, gt=0)
    min_concurrency: int = Field(3, ge=0, description="retries in flight always allowed")


class RedisConfig(_Strict):
    """Limits shared between gateway replicas; no URL: a single gateway, nothing shared."""

    url: str | None = Field(None, description="redis://host:port/db")
    replicas: int = Field(1, ge=1, description="gateway replicas; degraded caps = cap / this")
    key_prefix: str = Field("burstguard", min_length=1)
    lease_ttl_s: float = Field(10.0, gt=0, description="a dead gateway's slots return by then")
    timeout_s: float = Field(0.5, gt=0, description="per Redis command")
    rejoin_interval_s: float = Field(1.0, gt=0, description="retry Redis this often")
    sync_interval_s: float = Field(
        1.0, gt=0, description="renew leases, publish queue depth and tenant usage"
    )
    required: bool = Field(False, description="refuse to start when Redis is unreachable")
    tenant_window_s: float = Field(
        60.0, gt=0, description="tenant usage is summed per window of Redis' clock; a "
        "window's hash expires two windows after its last write",
    )  # fmt: skip
    max_tenants: int = Field(
        10_000, ge=1, description="tenants per class and window in Redis (and buffered between "
        "syncs); past it, usage is charged to the shared tenant ~overflow",
    )  # fmt: skip

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is not None and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("expected redis://host:port[/db], rediss://... or unix://path")
        if url is not None:  # the client's own parser (a bad port or option), at load
            from redis.connection import parse_url

            parse_url(url)  # its ValueError names what is wrong
        return url


class FleetConfig(_Strict):
    discovery: DiscoveryConfig = DiscoveryConfig()
    health: HealthConfig = HealthConfig()
    router: RouterConfig = RouterConfig()
    retry_budget: RetryBudgetConfig = RetryBudgetConfig()
    redis: RedisConfig = RedisConfig()


def check_backend_urls(
    urls: list[str] | tuple[str, ...], field: str, flag: bool = False
) -> tuple[str, ...]:
    """The normalised URLs of a static list; a bad or repeated one is a ConfigError naming
    its place: `field.0` in a config, `--backend 1` for a repeated flag (`flag`)."""

    def where(i: int) -> str:
        return f"{field} {i + 1}" if flag else f"{field}.{i}"

    seen: dict[str, int] = {}
    for i, url in enumerate(urls):
        norm = normalize_backend_url(url, where(i))
        if norm in seen:
            raise ConfigError(
                f"{where(i)}: {url!r} is the same backend as {where(seen[norm])} "
                f"({urls[seen[norm]]!r}); list each backend once"
            )
        seen[norm] = i
    return tuple(seen)
