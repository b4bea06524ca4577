"""One-off: decode steps' measured - fitted time (ms) by batch size, per leg."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from burstguard.core.engine.perf_model import FittedModel

run = Path(sys.argv[1])
f = yaml.safe_load((Path.home() / ".cache/burstguard/profiles/smollm2-135m-cpu.yaml").read_text())[
    "fitted"
]
m = FittedModel(
    f["c0_s"],
    f["c_prefill_token_s"],
    f["c_decode_seq_s"],
    f["c_context_token_s"],
    f["c_prefill_seq_s"],
)
steps = [x for x in map(json.loads, (run / "steps.jsonl").open()) if "ts" in x]
marks = [line.rstrip("\n").split("\t") for line in (run / "marks.txt").open()]
for i in range(0, len(marks), 2):
    a, b = float(marks[i][1]), float(marks[i + 1][1])
    g = defaultdict(list)
    for s in steps:
        if a <= s["ts"] <= b and all(
            n == 1 and o > 0 and c == p + o - 1 for n, c, p, o, *_ in s["r"]
        ):
            B = len(s["r"])
            ctx = sum(c for n, c, p, o, *_ in s["r"])
            g[B].append(((s["t1"] - s["ts"]) - m.decode_step_time(B, ctx)) * 1e3)
    print(
        marks[i][0],
        " ".join(f"B{B}:{statistics.median(v):+.1f}ms(n{len(v)})" for B, v in sorted(g.items())),
    )
