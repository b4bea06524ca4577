"""One-off: decode steps' measured - fitted time (ms) by batch size, per leg."""

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from steplog import fitted, is_decode, legs, steps

run = Path(sys.argv[1])
m = fitted()
logged = steps(run)
for name, a, b in legs(run):
    g = defaultdict(list)
    for s in logged:
        if a <= s["ts"] <= b and is_decode(s):
            B = len(s["r"])
            ctx = sum(c for n, c, p, o, *_ in s["r"])
            g[B].append(((s["t1"] - s["ts"]) - m.decode_step_time(B, ctx)) * 1e3)
    print(
        name,
        " ".join(f"B{B}:{statistics.median(v):+.1f}ms(n{len(v)})" for B, v in sorted(g.items())),
    )
