"""What a gateway config means when `burstguard epp` runs it behind Envoy (docs/epp.md).

The picker holds neither the client's connection nor the upstream call, so what needs the
proxy itself is turned off, and preemption, which the gateway carries out by closing the
upstream and resuming the client's stream later, can at most end the request: a class's
`preemptible: true` means that only where `epp.preempt: end` opts in. One pure function,
so the picker and `burstguard sim --epp` read a file the same way.
"""

from __future__ import annotations

from burstguard.core.gateway.config import GatewayConfig
from burstguard.errors import ConfigError

__all__ = ["epp_config", "preempt_ends"]


def epp_config(config: GatewayConfig) -> tuple[GatewayConfig, list[str]]:
    """`config` as the picker runs it, with a line per thing changed (for the log). Every
    backend's `resume` is off (Envoy holds the stream); preemptible classes stay so under
    `epp.preempt: end` (preempted = ended with a retryable error) and are turned off
    otherwise. Redis-shared limits are refused (ConfigError)."""
    if config.fleet.redis.url is not None:
        raise ConfigError(
            "fleet.redis: burstguard epp does not share limits through Redis; run one "
            "Endpoint Picker per InferencePool (or the standalone gateway)"
        )
    notes: list[str] = []
    classes = config.classes
    preemptible = ", ".join(c.name for c in classes if c.preemptible)
    if preemptible and config.epp.preempt == "end":
        notes.append(f"classes {preemptible}: a preempted request is ended with a retryable "
                     "error (code preempted), not resumed (epp.preempt: end)")  # fmt: skip
    elif preemptible:
        notes.append(f"classes {preemptible}: preemptible is off in EPP mode (no resume; "
                     "set epp.preempt: end to end a preempted request with a retryable "
                     "error)")  # fmt: skip
        classes = tuple(c.model_copy(update={"preemptible": False}) for c in classes)
    backends = config.backends
    if any(b.resume for b in backends):
        notes.append("backends: resume is off in EPP mode (Envoy holds the stream)")
        backends = tuple(b.model_copy(update={"resume": False}) for b in backends)
    fleet = config.fleet
    options = fleet.discovery.options
    if options is not None and options.resume:
        notes.append("fleet.discovery.options.resume is off in EPP mode")
        discovery = fleet.discovery.model_copy(
            update={"options": options.model_copy(update={"resume": False})}
        )
        fleet = fleet.model_copy(update={"discovery": discovery})
    update: dict[str, object] = {"classes": classes, "backends": backends, "fleet": fleet}
    if config.metrics.listen is not None:
        notes.append("metrics.listen is not used in EPP mode: /metrics is on epp.metrics_port "
                     "(metrics.api_key applies there)")  # fmt: skip
    if config.backend_deadlines.enabled:
        notes.append("backend_deadlines are off in EPP mode (Envoy holds the upstream: its "
                     "route timeouts bound a hung backend)")  # fmt: skip
        update["backend_deadlines"] = config.backend_deadlines.model_copy(update={"enabled": False})
    return config.model_copy(update=update), notes


def preempt_ends(config: GatewayConfig) -> bool:
    """Whether the picker (and the sim modelling it) ends preempted requests."""
    return config.epp.preempt == "end"
