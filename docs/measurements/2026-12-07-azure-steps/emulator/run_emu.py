"""One-off: the emulator with the step logger on the fidelity harness's Azure leg."""

import os
import sys
import time
from pathlib import Path

from burstguard.calibrate.fidelity import WORKLOADS, _bench
from burstguard.engines import vllm_cpu
from burstguard.procs import ManagedProcess, free_port

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
prof = sys.argv[2]
env = {
    "STEPLOG_PATH": str(out / "steps.jsonl"),
    "PYTHONPATH": str(Path(__file__).resolve().parent) + ":" + os.environ.get("PYTHONPATH", ""),
}
port = free_port()
em = ManagedProcess(
    [
        sys.executable,
        "-m",
        "burstguard.cli",
        "emulate",
        "--profile",
        prof,
        "--served-model-name",
        vllm_cpu.MODEL_NAME,
        "--port",
        str(port),
        "--max-num-seqs",
        "32",
        "--max-num-batched-tokens",
        "2048",
    ],
    f"http://127.0.0.1:{port}/health",
    env=env,
    log_path=out / "emu.log",
)
with em:
    key = next(k for k in WORKLOADS if k.startswith("azure"))
    (out / "marks.txt").open("a").write(f"{key}\t{time.time()}\n")
    r = _bench(f"http://127.0.0.1:{port}", out / "azure", WORKLOADS[key], 36.0, 1.0)
    (out / "marks.txt").open("a").write(f"end {key}\t{time.time()}\n")
    print(key, {k: r[k] for k in ("ttft_s", "e2e_s")}, flush=True)
