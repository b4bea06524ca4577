"""The gateway's configuration: one validated YAML file read by the server and the simulator.

Everything a policy decision depends on lives here, so the same file gives the same
decisions live and in `burstguard sim --gateway`. Validation errors name the bad field
(`admission.max_queue_requests: ...`) and are raised as `ConfigError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from burstguard.core.fleet.config import BackendOptions, FleetConfig, check_backend_urls
from burstguard.core.fleet.names import BackendNames
from burstguard.errors import BurstguardError, ConfigError, describe_validation_error
from burstguard.wire import headers

if TYPE_CHECKING:
    from burstguard.core.scaling.config import ScalingPolicy


class _Strict(BaseModel):
    # YAML reads .inf and .nan as floats: no setting here means either (an infinite
    # interval or timeout stalls the loop that uses it, or crashes it converting to int)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BackendConfig(BackendOptions):
    """One upstream engine (vLLM, SGLang, llama.cpp or the emulator) listed by URL."""

    url: str = Field(min_length=1, description="base URL, e.g. http://127.0.0.1:8000")
    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
        description="what metrics and logs call it (default: backend-<its place in the "
        "list>); never its address unless `backend_labels: url`",
    )  # fmt: skip
    metrics_url: str | None = Field(None, description="Prometheus /metrics (None: url/metrics)")


class QuotaLimit(_Strict):
    """A token-bucket quota: a request rate and a token rate (either may be absent: not
    limited), each per second or per minute of the core's clock, with a burst (the bucket's
    size; default: one period's worth, so `tokens_per_minute: 60000` may be used at once
    and then refills at 1000 per second, as a per-minute window would allow)."""

    requests_per_second: float | None = Field(None, gt=0)
    requests_per_minute: float | None = Field(None, gt=0)
    tokens_per_second: float | None = Field(None, gt=0)
    tokens_per_minute: float | None = Field(None, gt=0)
    burst_requests: float | None = Field(
        None, ge=1, description="request bucket size (default: one period of the rate)"
    )
    burst_tokens: float | None = Field(
        None, ge=1, description="token bucket size (default: one period of the rate); a "
        "request costing more can never be admitted (429, x-should-retry: false)",
    )  # fmt: skip

    @model_validator(mode="after")
    def _check(self) -> QuotaLimit:
        for what in ("requests", "tokens"):
            per_s = getattr(self, f"{what}_per_second")
            per_min = getattr(self, f"{what}_per_minute")
            if per_s is not None and per_min is not None:
                raise ValueError(f"give {what}_per_second or {what}_per_minute, not both")
            if getattr(self, f"burst_{what}") is not None and per_s is None and per_min is None:
                raise ValueError(f"burst_{what} needs {what}_per_second or {what}_per_minute")
        if self.rate("requests") is None and self.rate("tokens") is None:
            raise ValueError("a quota needs a request rate or a token rate (or both)")
        return self

    def rate(self, what: Literal["requests", "tokens"]) -> tuple[float, float] | None:
        """(refill per second, burst) of the `what` bucket; None: not limited."""
        per_s = getattr(self, f"{what}_per_second")
        per_min = getattr(self, f"{what}_per_minute")
        if per_s is None and per_min is None:
            return None
        rate = per_s if per_s is not None else per_min / 60.0
        burst = getattr(self, f"burst_{what}")
        return rate, burst if burst is not None else (per_s if per_s is not None else per_min)


class QuotaConfig(_Strict):
    """Per-tenant quotas (docs/gateway.md, "Quotas"). The most specific rule applies: the
    API key's own `quota`, else `tenants[tenant]`, else `classes[class]`, else `default`
    (None: unlimited). A key's rule is one bucket per key, every other rule one bucket per
    tenant (a class rule is the default for that class's tenants)."""

    default: QuotaLimit | None = Field(None, description="for tenants no other rule names")
    tenants: dict[str, QuotaLimit] = Field(default_factory=dict)
    classes: dict[str, QuotaLimit] = Field(default_factory=dict)
    reserve_output_tokens: int | None = Field(
        None, ge=0, description="output tokens charged at admission for a request without "
        "max_tokens (then settled to what it produced); None: predictor.default_max_tokens",
    )  # fmt: skip
    max_buckets: int = Field(
        10_000, ge=16, description="local buckets kept (tenant ids are the client's to choose); "
        "past it, refilled ones are dropped, then new tenants share the bucket `~overflow`",
    )  # fmt: skip


class ApiKeyConfig(_Strict):
    """An API key and who it belongs to; the tier is the request's priority class."""

    key: str = Field(min_length=8)
    tenant: str = Field(min_length=1)
    tier: str = Field(min_length=1)
    quota: QuotaLimit | None = Field(None, description="this key's own quota (one bucket)")


class ClassConfig(_Strict):
    """A priority class (interactive, standard, batch): its rank and its promises."""

    name: str = Field(min_length=1)
    rank: int = Field(ge=0, description="lower is served first under strict priority")
    ttft_target_s: float | None = Field(None, gt=0, description="the TTFT SLO for this class")
    queue_deadline_s: float | None = Field(
        None, gt=0, description="longest queue wait; a request that cannot start by then is shed"
    )
    max_wait_s: float | None = Field(
        None, gt=0, description="aging bound: after this wait the request goes ahead of all classes"
    )
    max_in_flight_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="share of the in-flight caps this class's own requests may fill",
    )
    min_in_flight_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of the request cap this class is guaranteed while it has requests "
        "waiting: below it, its requests go ahead of better classes and are not preempted "
        "(anti-starvation with a predictable rate; 0: strict priority may starve it)",
    )
    preemptible: bool = Field(
        False, description="a waiting request of a better class may preempt one of this class"
    )
    max_preemptions: int = Field(2, ge=0, description="preemptions per request at most")
    min_run_s: float = Field(
        0.0, ge=0, description="a request runs at least this long before it may be preempted"
    )
    first_token_floor_s: float | None = Field(
        None, gt=0, description="this class's floor of the first-token deadline (None: "
        "backend_deadlines.first_token_floor_s)",
    )  # fmt: skip
    stall_s: float | None = Field(
        None, gt=0, description="this class's inter-token stall deadline (None: "
        "backend_deadlines.stall_s)",
    )  # fmt: skip


class ListenConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class MetricsConfig(_Strict):
    """Who may read /metrics (docs/gateway.md, "Metrics"): on the main listener by
    default, open; `listen` moves it to a second listener (the main one then answers
    404), `api_key` makes it require `Authorization: Bearer <key>` wherever it is served."""

    listen: ListenConfig | None = Field(
        None, description="a second listener serving only /metrics, /health and /ready "
        "(for Prometheus inside the cluster); the main listener then has no /metrics",
    )  # fmt: skip
    api_key: str | None = Field(
        None, min_length=16, description="the bearer key /metrics requires (401 without it)"
    )


class LimitsConfig(_Strict):
    """What one client may hold of the gateway: bytes, time, connections, all before any
    authentication, and the per-tenant state a client choosing tenant ids may grow
    (docs/gateway.md, "Limits and timeouts", says what a client gets when one trips and
    which metric counts it)."""

    max_connections: int = Field(
        4096, ge=1, description="open client connections; one more is accepted and closed at once"
    )
    max_head_bytes: int = Field(
        64 * 1024, ge=1024, description="request line and headers (431 beyond)"
    )
    max_header_lines: int = Field(100, ge=1, description="header lines per request (431 beyond)")
    max_pipelined: int = Field(
        16, ge=1, description="requests parsed ahead of their turn on one connection; what "
        "follows waits unparsed (and unread) until they are served",
    )  # fmt: skip
    head_timeout_s: float = Field(
        30.0, gt=0, description="a request head, from its first byte (or the connection's "
        "opening) to its end (408 and close)",
    )  # fmt: skip
    body_timeout_s: float = Field(
        60.0, gt=0, description="a request body, from the end of its head (408 and close)"
    )
    keep_alive_s: float = Field(
        75.0, gt=0, description="an idle keep-alive connection is closed after this; longer "
        "than clients' own pools keep theirs (aiohttp: 15 s), so they close first",
    )  # fmt: skip
    send_timeout_s: float = Field(
        60.0, gt=0, description="longest a client may leave its answer unread (its socket "
        "full); then the connection is cut and a stream's upstream aborted (nginx send_timeout)",
    )  # fmt: skip
    linger_s: float = Field(
        2.0, ge=0, description="after an error that closes the connection, how long what the "
        "client still sends is read and dropped, so it reads the answer instead of a reset",
    )  # fmt: skip
    max_tenant_chars: int = Field(
        128, ge=1, description="a tenant id (header or API key) longer than this is refused (400)"
    )
    max_queued_tenants: int = Field(
        1024, ge=1, description="distinct tenants queued per class; a new one past this queues "
        "as the shared tenant `~overflow` (each pick looks at every queued tenant)",
    )  # fmt: skip
    max_idle_tenants: int = Field(
        1024, ge=0, description="per class, idle tenants whose fairness counter (VTC) is "
        "remembered, least recently idle forgotten first (active tenants are always kept)",
    )  # fmt: skip


class PolicyConfig(_Strict):
    """Ordering: strict classes (or one shared queue), the order within a class, fairness."""

    priority: bool = Field(True, description="strict priority between classes (with aging)")
    order: Literal["fcfs", "spjf"] = "fcfs"
    fairness: Literal["none", "vtc", "drr"] = "none"
    spjf_aging_tokens_per_s: float = Field(
        100.0, ge=0, description="SPJF: each second waited counts as this many tokens shorter"
    )
    drr_quantum_tokens: int = Field(2048, ge=1, description="DRR: tokens a tenant earns per turn")


class AdmissionConfig(_Strict):
    """Bounds on the queue and on what is in flight, and how the caps adapt."""

    max_queue_requests: int = Field(4096, ge=1)
    max_queue_tokens: int = Field(4_000_000, ge=1)
    max_in_flight: int = Field(256, ge=1, description="request cap over all backends")
    max_in_flight_per_backend: int | None = Field(
        None,
        ge=1,
        description="request cap per backend (shared by all gateway replicas "
        "through fleet.redis leases); None: max_in_flight",
    )
    max_in_flight_tokens: int | None = Field(
        None, ge=1, description="token cap (prompt + predicted output); None: learned only"
    )
    min_in_flight: int = Field(4, ge=1, description="adaptation never goes below this")
    adapt: bool = Field(True, description="adapt the caps from backend metrics")
    target_waiting: int = Field(0, ge=0, description="engine waiting queue to hold")
    kv_high: float = Field(0.95, gt=0, le=1, description="shrink above this KV usage")
    kv_low: float = Field(0.85, gt=0, le=1, description="grow only below this KV usage")
    grow_fraction: float = Field(0.05, gt=0, le=1, description="growth per adaptation step")
    rate_unit: Literal["tokens", "requests"] = "tokens"
    rate_half_life_s: float = Field(5.0, gt=0, description="EWMA half-life of the service rate")
    initial_service_rate: float | None = Field(
        None, gt=0, description="prior service rate (rate_unit per s) until one is measured"
    )
    min_retry_after_s: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> AdmissionConfig:
        if self.min_in_flight > self.max_in_flight:
            raise ValueError("min_in_flight must be <= max_in_flight")
        if self.kv_low > self.kv_high:
            raise ValueError("kv_low must be <= kv_high")
        return self


class PredictorConfig(_Strict):
    """Output-length prediction from max_tokens, the prompt and a history of actual lengths."""

    history_half_life: float = Field(50.0, gt=0, description="EWMA half-life, in requests")
    min_samples: int = Field(5, ge=1, description="samples before a history key is trusted")
    default_fraction: float = Field(
        1.0, gt=0, le=1, description="predicted share of max_tokens with no history"
    )
    default_max_tokens: int = Field(1024, ge=1, description="assumed when max_tokens is absent")
    max_history_keys: int = Field(
        10_000, ge=8, description="history keys kept, least recently used dropped first "
        "(tenants may come from a client header: their number is the client's to choose)",
    )  # fmt: skip


class DeadlineConfig(_Strict):
    """When the gateway stops waiting on a backend that holds a request silent (a hung
    engine: a stopped process, a wedged GPU, a partition with no reset), in seconds of the
    core's clock (engine seconds). docs/gateway.md, "Hung backends", argues each default
    and what it costs.

    A request with no first token by `max(floor, factor x predicted TTFT)` after its
    release fails over as a refused one does; the predicted TTFT is the prefill work ahead
    of it on its backend (its own prompt plus the prompts sent there still without a first
    token) at the slower of `prefill_tokens_per_s` and the backend's own learned rate, so
    a long prompt on a slow but healthy engine is given the time it needs. A stream that
    has started and then sends nothing for `stall_s` resumes on another backend (where its
    backend resumes) or ends with one in-band error event. A non-streamed answer is silent
    until whole: its deadline also covers `max_tokens` at the slower of
    `decode_tokens_per_s` and the backend's learned pace. When a backend's circuit opens,
    what it holds fails over at once."""

    enabled: bool = Field(True, description="off: only backends[].read_timeout_s bounds a hang")
    first_token_floor_s: float = Field(
        10.0, gt=0, description="a first-token deadline is never shorter than this"
    )
    first_token_factor: float = Field(
        4.0, ge=1, description="the deadline's multiple of the predicted time to first token"
    )
    prefill_tokens_per_s: float = Field(
        2000.0, gt=0, description="the prefill rate assumed at most (a backend measured "
        "slower is assumed at its own rate)",
    )  # fmt: skip
    decode_tokens_per_s: float = Field(
        10.0, gt=0, description="per-stream decode rate assumed at most, for the deadline of a "
        "non-streamed answer",
    )  # fmt: skip
    stall_s: float = Field(
        15.0, gt=0, description="longest silence of a started stream (a client that is not "
        "reading is not the backend's silence)",
    )  # fmt: skip


class AutoscalerConfig(_Strict):
    """The scaling policy the gateway runs on its own signals (docs/autoscaling.md): it
    exports the decision as `burstguard_desired_replicas` for KEDA to act on."""

    policy: str | dict[str, Any] = Field(
        description="a preset (keda-queue, keda-rate, kpa, predictive), a policy file, or a "
        "policy written inline (a policy file's fields: `burstguard scaling show NAME`)"
    )
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    cold_start_s: float | None = Field(None, ge=0)
    initial_replicas: int | None = Field(
        None, ge=0, description="the count the model starts from (default: the minimum)"
    )

    @model_validator(mode="after")
    def _check(self) -> AutoscalerConfig:
        self.scaling_policy()  # a bad name, file or override fails at load, naming the field
        return self

    def scaling_policy(self) -> ScalingPolicy:
        from burstguard.core.scaling import config as autoscale_config

        try:
            policy = (
                autoscale_config.ScalingPolicy.from_dict(self.policy, "inline policy")
                if isinstance(self.policy, dict)
                else autoscale_config.load_policy(self.policy)
            )
            return policy.with_overrides(
                min_replicas=self.min_replicas,
                max_replicas=self.max_replicas,
                cold_start_s=self.cold_start_s,
            )
        except BurstguardError as exc:
            raise ValueError(str(exc)) from None


def _default_classes() -> tuple[ClassConfig, ...]:
    return (
        ClassConfig(name="interactive", rank=0, ttft_target_s=1.0, queue_deadline_s=5.0),
        ClassConfig(
            name="standard", rank=1, ttft_target_s=5.0, queue_deadline_s=30.0, max_wait_s=30.0
        ),
        ClassConfig(
            name="batch",
            rank=2,
            queue_deadline_s=300.0,
            max_wait_s=120.0,
            max_in_flight_fraction=0.8,
        ),
    )


class EppConfig(_Strict):
    """`burstguard epp`, the Endpoint Picker behind a Gateway API gateway (docs/epp.md): its
    ports, and the request headers it classifies by besides the gateway's own."""

    grpc_port: int = Field(
        9002, ge=0, le=65535, description="ext_proc and the gRPC health services (GAIE's port)"
    )
    metrics_port: int = Field(9090, ge=0, le=65535, description="HTTP /metrics, /health, /ready")
    objective_header: str = headers.OBJECTIVE
    objectives: dict[str, str] = Field(
        default_factory=dict, description="InferenceObjective name -> class (an objective "
        "named like a class is that class; any other is not a class choice)",
    )  # fmt: skip
    fairness_header: str = Field(
        headers.FAIRNESS_ID, description="the tenant, where the tenant header is absent"
    )
    slo_ttft_header: str = Field(
        headers.SLO_TTFT_MS, description="a TTFT objective (ms): the cheapest class whose "
        "ttft_target_s meets it, where no key tier, class or objective names one",
    )  # fmt: skip
    preempt: Literal["off", "end"] = Field(
        "off", description="what a class's `preemptible: true` means behind the picker, which "
        "cannot resume: off (no preemption; a better class waits for a free slot) or end (a "
        "waiting better class takes the slot and the preempted request's answer ends with "
        "a retryable error, code `preempted`; it is not resumed)",
    )  # fmt: skip
    fallbacks: int = Field(
        0, ge=0, le=8, description="other healthy endpoints named after the pick, for a "
        "gateway that retries on them (they bypass the queue); 0 for plain Envoy, whose "
        "ORIGINAL_DST cluster reads one address (a list there finds no host: 503)",
    )  # fmt: skip


class GatewayConfig(_Strict):
    """The whole gateway: where to listen, backends, keys, classes, policy, admission."""

    listen: ListenConfig = ListenConfig()
    limits: LimitsConfig = LimitsConfig()
    backends: tuple[BackendConfig, ...] = ()
    api_keys: tuple[ApiKeyConfig, ...] = ()
    max_body_bytes: int = Field(1 << 20, ge=1024)
    class_header: str = headers.CLASS
    tenant_header: str = headers.TENANT
    default_class: str = "standard"
    default_tenant: str = "default"
    scrape_interval_s: float = Field(0.25, gt=0, description="wall seconds between scrapes")
    engine_speedup: float = Field(
        1.0,
        gt=0,
        description="policy times (classes, admission) are seconds of engine time; against "
        "an emulator at --speedup S set S: the live gateway's clock then runs S x wall time, "
        "so the sim and the live gateway read this file the same way",
    )
    log_requests: bool = Field(True, description="one JSON log line per request")
    metrics: MetricsConfig = MetricsConfig()
    backend_labels: Literal["name", "url"] = Field(
        "name", description="how /metrics, logs and summaries call a backend: its name "
        "(`backends[].name`, else backend-<i>, discovered ones backend-<hash>), or `url` "
        "(its address: only where whoever reads them may know it)",
    )  # fmt: skip
    drain_s: float = Field(
        10.0, gt=0, description="wall seconds a stopping gateway (SIGTERM) lets in-flight "
        "answers finish; what is queued and cannot finish by then is answered 503 at once; "
        "keep terminationGracePeriodSeconds above the preStop sleep + this",
    )  # fmt: skip
    stream_flush_ms: float = Field(
        10.0, ge=0, le=1000,
        description="a stream's chunks are written to its client at most this often (the "
        "first at once; a sooner one is held until the next tick); 0: every read at once",
    )  # fmt: skip
    classes: tuple[ClassConfig, ...] = Field(default_factory=_default_classes, min_length=1)
    policy: PolicyConfig = PolicyConfig()
    admission: AdmissionConfig = AdmissionConfig()
    predictor: PredictorConfig = PredictorConfig()
    backend_deadlines: DeadlineConfig = DeadlineConfig()
    autoscaler: AutoscalerConfig | None = None
    fleet: FleetConfig = FleetConfig()
    quotas: QuotaConfig = QuotaConfig()
    epp: EppConfig = EppConfig()

    @model_validator(mode="after")
    def _check(self) -> GatewayConfig:
        check_backend_urls([b.url for b in self.backends], "backends")  # duplicates
        labels = self.backend_names().all(self.backend_urls())
        for i, label in enumerate(labels):
            if label in labels[:i]:
                raise ValueError(f"backends.{i}: the name {label!r} is taken; name each once")
        listen = self.metrics.listen
        if listen is not None and (listen.host, listen.port) == (self.listen.host,
                                                                 self.listen.port):  # fmt: skip
            raise ValueError("metrics.listen: the same address as listen; give another port")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes: duplicate class names in {names}")
        if self.default_class not in names:
            raise ValueError(f"default_class: {self.default_class!r} is not one of {names}")
        guaranteed = sum(c.min_in_flight_fraction for c in self.classes)
        if guaranteed >= 1:
            raise ValueError(
                f"classes: min_in_flight_fraction sums to {guaranteed:g}; the guaranteed "
                "shares must leave the rest of the slots to strict priority (sum below 1)"
            )
        for c in self.classes:
            if c.min_in_flight_fraction > c.max_in_flight_fraction:
                raise ValueError(
                    f"classes: {c.name}: min_in_flight_fraction exceeds max_in_flight_fraction"
                )
        for name, cls in self.epp.objectives.items():
            if cls not in names:
                raise ValueError(f"epp.objectives.{name}: {cls!r} is not one of {names}")
        for i, k in enumerate(self.api_keys):
            if k.tier not in names:
                raise ValueError(f"api_keys.{i}.tier: {k.tier!r} is not one of {names}")
        for cls in self.quotas.classes:
            if cls not in names:
                raise ValueError(f"quotas.classes: {cls!r} is not one of {names}")
        keys = [k.key for k in self.api_keys]
        if len(set(keys)) != len(keys):
            raise ValueError("api_keys: the same key is listed twice")
        return self

    def backend_urls(self) -> tuple[str, ...]:
        """The static backends' normalised URLs (the fleet's names for them)."""
        return check_backend_urls([b.url for b in self.backends], "backends")

    def backend_names(self) -> BackendNames:
        """What metrics and logs call each backend (`core.fleet.names`)."""
        return BackendNames(zip(self.backend_urls(), (b.name for b in self.backends),
                                strict=True), by_url=self.backend_labels == "url")  # fmt: skip

    def backend_config(self, url: str) -> BackendConfig:
        """The settings of backend `url`, the one place they are read from: its static
        entry; for any other (discovered, or a simulated replica) `fleet.discovery.options`,
        else the first entry's settings, else the defaults, with its own URL."""
        for b, norm in zip(self.backends, self.backend_urls(), strict=True):
            if norm == url:
                return b
        options = self.fleet.discovery.options
        if options is not None:
            return BackendConfig(url=url, **options.model_dump())
        base = self.backends[0] if self.backends else BackendConfig(url=url)
        return base.model_copy(update={"url": url, "metrics_url": None})

    @property
    def prompt_tokenizer(self) -> str:
        """How prompts are counted: before routing, so one way for the whole fleet — the
        first static backend's tokenizer, else the discovered backends' one."""
        if self.backends:
            return self.backends[0].tokenizer
        return self.backend_config("http://discovered").tokenizer

    def class_by_name(self, name: str | None) -> ClassConfig:
        """The class called `name` (None: the default class). Requests reach the core
        classified (`core.gateway.classify`), so an unknown name is a ValueError, never
        silently the default."""
        wanted = self.default_class if name is None else name
        for c in self.classes:
            if c.name == wanted:
                return c
        raise ValueError(f"class {name!r} is not configured (classify requests first)")

    @classmethod
    def load(cls, path: str | Path) -> GatewayConfig:
        """Reads and validates a YAML file; any problem is a ConfigError naming the field."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the gateway config ({exc.strerror})") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the gateway config must be a mapping of fields")
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, object], source: str = "gateway config") -> GatewayConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {describe_validation_error(exc)}") from exc
        except BurstguardError as exc:  # a backend check inside a validator
            raise ConfigError(f"{source}: {exc}") from exc


def load(path: str | Path) -> GatewayConfig:
    """`GatewayConfig.load` as a function."""
    return GatewayConfig.load(path)
