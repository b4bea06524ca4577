"""The gateway core's cost per release against the number of distinct tenants queued in
a class (docs/gateway.md, "Limits and timeouts": why `limits.max_queued_tenants`).

Each pick of VTC or DRR looks at every queued tenant, so a client that queues requests
under many tenant ids makes every release dearer. One slot, 2 requests per tenant
queued, half of them released one by one; prints microseconds per release. About 20 s:
`python benchmarks/bench_tenants.py`.
"""

from __future__ import annotations

import time

from burstguard.gateway.config import GatewayConfig
from burstguard.gateway.core import GatewayCore
from burstguard.gateway.events import Release
from burstguard.gateway.request import GatewayRequest

TENANTS = (16, 256, 1024, 4096)


def per_release_us(fairness: str, tenants: int) -> float:
    gw = GatewayCore(GatewayConfig.from_dict({
        "policy": {"fairness": fairness},
        "limits": {"max_queued_tenants": tenants},
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False,
                      "max_queue_requests": 2 * tenants, "max_queue_tokens": 10**9},
    }))  # fmt: skip
    for k in range(2 * tenants):
        gw.submit(GatewayRequest(f"r{k}", 0.0, 10, 10, "standard", f"t{k % tenants}"), 0.0)
    start = time.perf_counter()
    for _ in range(tenants):
        (r,) = [e.req for e in gw.dispatch(0.0) if isinstance(e, Release)]
        gw.on_finish(r.id, 0.0, 10)
    return (time.perf_counter() - start) / tenants * 1e6


def main() -> None:
    print("| queued tenants | " + " | ".join(str(n) for n in TENANTS) + " |")
    print("|---|" + "---:|" * len(TENANTS))
    for fairness in ("none", "vtc", "drr"):
        cells = " | ".join(f"{per_release_us(fairness, n):.0f} us" for n in TENANTS)
        print(f"| `{fairness}` | {cells} |", flush=True)


if __name__ == "__main__":
    main()
