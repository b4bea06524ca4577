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
from burstguard.gateway.events import Arrive, Finish, Release
from burstguard.gateway.request import GatewayRequest

TENANTS = (16, 256, 1024, 4096)


def per_release_us(fairness: str, tenants: int) -> float:
    gw = GatewayCore(GatewayConfig.from_dict({
        "backends": [{"url": "http://a:1"}],
        "policy": {"fairness": fairness},
        "limits": {"max_queued_tenants": tenants},
        "admission": {"max_in_flight": 1, "min_in_flight": 1, "adapt": False,
                      "max_queue_requests": 2 * tenants, "max_queue_tokens": 10**9},
    }))  # fmt: skip
    released: list[GatewayRequest] = []
    for k in range(2 * tenants):  # the first takes the slot, the rest queue
        req = GatewayRequest(f"r{k}", 0.0, 10, 10, "standard", f"t{k % tenants}")
        released += [e.req for e in gw.handle(Arrive(req), 0.0) if isinstance(e, Release)]
    (r,) = released
    start = time.perf_counter()
    for _ in range(tenants):  # each end releases the next: one pick
        (r,) = [e.req for e in gw.handle(Finish(r.id, 10), 0.0) if isinstance(e, Release)]
    return (time.perf_counter() - start) / tenants * 1e6


def main() -> None:
    print("| queued tenants | " + " | ".join(str(n) for n in TENANTS) + " |")
    print("|---|" + "---:|" * len(TENANTS))
    for fairness in ("none", "vtc", "drr"):
        cells = " | ".join(f"{per_release_us(fairness, n):.0f} us" for n in TENANTS)
        print(f"| `{fairness}` | {cells} |", flush=True)


if __name__ == "__main__":
    main()
