"""Request headers burstguard sends and reads, its own and its peers'.

Its own carry a request's class and tenant to the gateway. The peers' are what the Gateway
API Inference Extension's Endpoint Pickers (llm-d's) read: a fairness id per tenant and
per-request latency objectives, so a workload bench sends through such a router is
ordered as burstguard's gateway would order it.
"""

from __future__ import annotations

import math

CLASS = "x-burstguard-class"
TENANT = "x-burstguard-tenant"
FAIRNESS_ID = "x-llm-d-inference-fairness-id"
SLO_TTFT_MS = "x-slo-ttft-ms"
SLO_TPOT_MS = "x-slo-tpot-ms"

# The Gateway API Inference Extension's Endpoint Picker protocol (`burstguard epp`): the
# InferenceObjective a request names, the endpoint picked (as a header and as the same key
# in Envoy's `envoy.lb` dynamic metadata), the gateway's subset hint, and what served it.
OBJECTIVE = "x-gateway-inference-objective"
DESTINATION = "x-gateway-destination-endpoint"
DESTINATION_SUBSET = "x-gateway-destination-endpoint-subset"
DESTINATION_SERVED = "x-gateway-destination-endpoint-served"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"


def bearer(api_key: str | None) -> dict[str, str]:
    """The `Authorization` header carrying an API key (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def retry_after_seconds(seconds: float | None) -> int:
    """The Retry-After the gateway and the picker send for a wait of `seconds` (wall):
    delta-seconds rounded up, at least 1 (what the clients, live and simulated, wait)."""
    if seconds is None or not math.isfinite(seconds):
        return 1
    return max(1, math.ceil(seconds))
