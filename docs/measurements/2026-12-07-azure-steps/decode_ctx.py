"""One-off: decode steps of a leg, measured / fitted, by what surrounds them."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from burstguard.core.engine.perf_model import BatchShape, FittedModel

run = Path(sys.argv[1])
leg = int(sys.argv[2])
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
a, b = float(marks[2 * leg][1]), float(marks[2 * leg + 1][1])
ss = [s for s in steps if a <= s["ts"] <= b]


def isdec(s):
    return all(n == 1 and o > 0 and c == p + o - 1 for n, c, p, o, *_ in s["r"])


def shape(s):
    ctx = sum(c for n, c, p, o, *_ in s["r"])
    return BatchShape(0, len(s["r"]), ctx, 0, 0)


g = defaultdict(list)
since = 99
for i, s in enumerate(ss):
    if not isdec(s):
        since = 0
        continue
    since += 1
    r = (s["t1"] - s["ts"]) / m.step_time(shape(s)) - 1
    prev = ss[i - 1] if i else None
    left = prev is not None and isdec(prev) and len(prev["r"]) > len(s["r"])
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
