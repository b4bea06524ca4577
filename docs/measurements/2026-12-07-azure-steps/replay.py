"""One-off: replay vLLM's logged steps through the fitted step model, by regime."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from burstguard.core.engine.perf_model import BatchShape, FittedModel

run = Path(sys.argv[1])
prof_path = (
    Path(sys.argv[2])
    if len(sys.argv) > 2 and sys.argv[2].endswith(".yaml")
    else Path.home() / ".cache/burstguard/profiles/smollm2-135m-cpu.yaml"
)
f = yaml.safe_load(prof_path.read_text())["fitted"]
m = FittedModel(
    f["c0_s"],
    f["c_prefill_token_s"],
    f["c_decode_seq_s"],
    f["c_context_token_s"],
    f["c_prefill_seq_s"],
)
steps = [x for x in map(json.loads, (run / "steps.jsonl").open()) if "ts" in x]
marks = [line.rstrip("\n").split("\t") for line in (run / "marks.txt").open()]
legs = []
for i in range(0, len(marks), 2):
    legs.append((marks[i][0], float(marks[i][1]), float(marks[i + 1][1])))


def shape(s):
    pre = dec = ctx = pseq = 0
    for n, c, p, o, *_ in s["r"]:
        ctx += c
        if n == 1 and o > 0 and c == p + o - 1:
            dec += 1
        else:
            pre += n
            pseq += c == 0
    return BatchShape(pre, dec, ctx, 0, pseq)


for name, a, b in legs:
    ss = [s for s in steps if a <= s["ts"] <= b]
    rows = []
    for i, s in enumerate(ss):
        own = s["dur"] if "dur" in s else s["t1"] - s["ts"]
        nxt = ss[i + 1]["ts"] if i + 1 < len(ss) else None
        period = (
            own
            if "dur" in s
            else (nxt - s["ts"] if nxt is not None and nxt - s["t1"] < 0.005 else own)
        )
        sh = shape(s)
        rows.append((sh, own, period, m.step_time(sh), s))
    print(
        f"== {name}: {len(rows)} steps, busy {sum(r[2] for r in rows):.2f} s measured (period), "
        f"{sum(r[1] for r in rows):.2f} s (step only), predicted {sum(r[3] for r in rows):.2f} s"
    )
    groups = defaultdict(list)
    for sh, own, per, pred, _s in rows:
        if sh.prefill_tokens and sh.decode_seqs:
            k = "mixed"
        elif sh.prefill_tokens:
            k = "prefill only"
        else:
            b = sh.decode_seqs
            k = "decode " + (
                "1"
                if b == 1
                else "2-4"
                if b <= 4
                else "5-8"
                if b <= 8
                else "9-16"
                if b <= 16
                else "17-32"
            )
        groups[k].append((sh, own, per, pred))
    for k in sorted(groups):
        g = groups[k]
        per = sum(x[2] for x in g)
        own = sum(x[1] for x in g)
        pred = sum(x[3] for x in g)
        ratios = [x[2] / x[3] - 1 for x in g]
        print(
            f"  {k:14s} n={len(g):4d} measured {per:6.2f} s (step-only {own:6.2f}) "
            f"predicted {pred:6.2f} s "
            f"pred/meas-1 {pred / per - 1:+.1%}; per-step median {statistics.median(ratios):+.1%} "
            f"mean ctx {statistics.fmean(x[0].context_tokens for x in g):.0f} "
            f"mean prefill tok {statistics.fmean(x[0].prefill_tokens for x in g):.0f}"
        )

if "-v" in sys.argv:
    name, a, b = legs[0]
    ss = [s for s in steps if a <= s["ts"] <= b]
    t00 = ss[0]["ts"]
    for s in ss:
        sh = shape(s)
        own = s["dur"] if "dur" in s else s["t1"] - s["ts"]
        pre = [n for n, c, p, o, *_ in s["r"] if not (n == 1 and o > 0 and c == p + o - 1)]
        print(
            f"{s['ts'] - t00:7.2f} dec {sh.decode_seqs:2d} ctx {sh.context_tokens:5d} "
            f"prefill {pre} meas {own * 1e3:7.1f} pred {m.step_time(sh) * 1e3:7.1f} "
            f"({m.step_time(sh) / own - 1:+.0%}) wait {s['waiting']}"
        )
