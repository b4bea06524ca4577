"""Request headers burstguard sends and reads, its own and its peers'.

Its own carry a request's class and tenant to the gateway. The peers' are what the Gateway
API Inference Extension's Endpoint Pickers (llm-d's) read: a fairness id per tenant and
per-request latency objectives, so a workload bench sends through such a router is
ordered as burstguard's gateway would order it.
"""

from __future__ import annotations

CLASS = "x-burstguard-class"
TENANT = "x-burstguard-tenant"
FAIRNESS_ID = "x-llm-d-inference-fairness-id"
SLO_TTFT_MS = "x-slo-ttft-ms"
SLO_TPOT_MS = "x-slo-tpot-ms"
