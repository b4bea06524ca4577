"""What a fleet simulation assumes when the user does not say: the most replicas it starts
with and the gateway in front of an autoscaled fleet. A library module, so that `tune`
and tests take them without importing the `burstguard sim` command."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from burstguard.gateway.config import GatewayConfig

__all__ = ["MAX_REPLICAS", "fleet_gateway"]

MAX_REPLICAS = 1024  # replicas one simulation starts with at most (each is an engine core)


def fleet_gateway(max_replicas: int) -> GatewayConfig:
    """The gateway in front of an autoscaled fleet when no --gateway is given: the default
    policies, with the in-flight cap per replica (256, vLLM's max-num-seqs default) and
    room for all of them in the total."""
    from burstguard.gateway.config import GatewayConfig

    return GatewayConfig.from_dict(
        {"admission": {"max_in_flight": 256 * max_replicas, "max_in_flight_per_backend": 256}}
    )
