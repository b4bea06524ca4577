"""One-off: isolated decode batches and lone prefills under the step logger (same server
settings as the legs), to tell machine drift from a leg-only slowdown."""

import asyncio
import os
import sys
import time
from pathlib import Path

from burstguard.bench.stream import new_client
from burstguard.calibrate.probe import Target, _one
from burstguard.engines import vllm_cpu

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
os.environ["STEPLOG_PATH"] = str(out / "steps.jsonl")
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")])
)


async def main(base):
    t = Target(base, vllm_cpu.MODEL_NAME)
    client = new_client(base, 120)
    await _one(client, t, 32, 4)
    for rep in range(2):
        for b in (1, 4, 8, 12):
            mark = time.time()
            (out / "marks.txt").open("a").write(f"decode B={b} rep {rep}\t{mark}\n")
            await asyncio.gather(*(_one(client, t, 16, 64) for _ in range(b)))
            (out / "marks.txt").open("a").write(f"end\t{time.time()}\n")
        for p in (128, 512):
            (out / "marks.txt").open("a").write(f"prefill {p} rep {rep}\t{time.time()}\n")
            for _ in range(3):
                await _one(client, t, p, 1)
            (out / "marks.txt").open("a").write(f"end\t{time.time()}\n")
    client.close()


with vllm_cpu.server(
    startup_timeout_s=400.0, max_num_seqs=32, max_model_len=2048, log_path=out / "vllm.log"
) as s:
    asyncio.run(main(s.base_url))
