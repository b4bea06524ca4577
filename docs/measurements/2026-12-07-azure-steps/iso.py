"""One-off: isolated decode batches and lone prefills under the step logger (same server
settings as the legs), to tell machine drift from a leg-only slowdown."""

import asyncio
import sys
from pathlib import Path

from steplog import leg, logged_server

from burstguard.bench.stream import new_client
from burstguard.calibrate.probe import Target, _one
from burstguard.engines import vllm_cpu

out = Path(sys.argv[1])


async def main(base):
    t = Target(base, vllm_cpu.MODEL_NAME)
    client = new_client(base, 120)
    await _one(client, t, 32, 4)
    for rep in range(2):
        for b in (1, 4, 8, 12):
            with leg(out, f"decode B={b} rep {rep}"):
                await asyncio.gather(*(_one(client, t, 16, 64) for _ in range(b)))
        for p in (128, 512):
            with leg(out, f"prefill {p} rep {rep}"):
                for _ in range(3):
                    await _one(client, t, p, 1)
    client.close()


with logged_server(out) as s:
    asyncio.run(main(s.base_url))
