"""One-off: vLLM-CPU with the step logger, the fidelity harness's Azure leg (and a Poisson
control leg) by the same client; step logs + bench records under OUT."""

import os
import sys
import time
from pathlib import Path

from burstguard.calibrate.fidelity import WORKLOADS, _bench
from burstguard.engines import vllm_cpu

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
legs = sys.argv[2].split(",")
os.environ["STEPLOG_PATH"] = str(out / "steps.jsonl")
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")])
)
t = time.time()
with vllm_cpu.server(
    startup_timeout_s=400.0, max_num_seqs=32, max_model_len=2048, log_path=out / "vllm.log"
) as s:
    print(f"up in {time.time() - t:.0f}s", flush=True)
    for i, name in enumerate(legs):
        key = next(k for k in WORKLOADS if k.startswith(name))
        mark = time.time()
        (out / "marks.txt").open("a").write(f"{key}\t{mark}\n")
        r = _bench(s.base_url, out / f"{i}-{key.split()[0]}", WORKLOADS[key], 36.0, 1.0)
        (out / "marks.txt").open("a").write(f"end {key}\t{time.time()}\n")
        print(key, {k: r[k] for k in ("ttft_s", "e2e_s")}, flush=True)
