"""One-off: decode steps of a leg, measured / fitted, by what surrounds them."""

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from steplog import fitted, is_decode, legs, shape, steps

run = Path(sys.argv[1])
leg = int(sys.argv[2])
m = fitted()
_, a, b = legs(run)[leg]
ss = [s for s in steps(run) if a <= s["ts"] <= b]


g = defaultdict(list)
since = 99
for i, s in enumerate(ss):
    if not is_decode(s):
        since = 0
        continue
    since += 1
    r = (s["t1"] - s["ts"]) / m.step_time(shape(s)) - 1
    prev = ss[i - 1] if i else None
    left = prev is not None and is_decode(prev) and len(prev["r"]) > len(s["r"])
    # a request finishing at the end of this step is unknown here: the next step says
    nxt = ss[i + 1] if i + 1 < len(ss) else None
    leaving = nxt is not None and len(nxt["r"]) < len(s["r"])
    g[
        "since prefill "
        + ("1" if since == 1 else "2" if since == 2 else "3-5" if since <= 5 else "6+")
    ].append(r)
    g["a request left before it" if left else "same batch as before"].append(r)
    g["one leaves after it" if leaving else "none leaves after it"].append(r)
for k in sorted(g):
    v = g[k]
    print(
        f"{k:28s} n={len(v):4d} median {statistics.median(v):+.1%} mean {statistics.fmean(v):+.1%}"
    )
