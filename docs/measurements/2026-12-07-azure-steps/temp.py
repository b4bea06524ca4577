"""One-off: isolated decode batches, greedy (temperature 0, as calibrate probes) vs the
server's default sampling (no temperature: what `burstguard bench` sends), step-logged."""

import asyncio
import json
import sys
from pathlib import Path

from steplog import leg, logged_server

from burstguard.bench.stream import new_client
from burstguard.calibrate import probe
from burstguard.engines import vllm_cpu

out = Path(sys.argv[1])
real_dumps = json.dumps
MODE = ["greedy"]


def dumps(obj, *a, **k):
    if isinstance(obj, dict) and MODE[0] == "default":
        obj = {k2: v for k2, v in obj.items() if k2 != "temperature"}
    return real_dumps(obj, *a, **k)


probe.json.dumps = dumps


async def main(base):
    t = probe.Target(base, vllm_cpu.MODEL_NAME)
    client = new_client(base, 120)
    await probe._one(client, t, 32, 4)
    for rep in range(2):
        for mode in ("greedy", "default"):
            MODE[0] = mode
            for b in (1, 4, 8, 16):
                with leg(out, f"{mode} B={b} rep {rep}"):
                    await asyncio.gather(*(probe._one(client, t, 16, 48) for _ in range(b)))
    client.close()


with logged_server(out) as s:
    asyncio.run(main(s.base_url))
