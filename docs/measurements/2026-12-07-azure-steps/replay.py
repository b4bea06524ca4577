"""One-off: replay vLLM's logged steps through the fitted step model, by regime."""

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from steplog import MACHINE_FIT, decodes, fitted, legs, shape, steps

run = Path(sys.argv[1])
given = len(sys.argv) > 2 and sys.argv[2].endswith(".yaml")
m = fitted(Path(sys.argv[2]) if given else MACHINE_FIT)
logged = steps(run)
run_legs = legs(run)


for name, a, b in run_legs:
    ss = [s for s in logged if a <= s["ts"] <= b]
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
    name, a, b = run_legs[0]
    ss = [s for s in logged if a <= s["ts"] <= b]
    t00 = ss[0]["ts"]
    for s in ss:
        sh = shape(s)
        own = s["dur"] if "dur" in s else s["t1"] - s["ts"]
        pre = [r[0] for r in s["r"] if not decodes(r)]
        print(
            f"{s['ts'] - t00:7.2f} dec {sh.decode_seqs:2d} ctx {sh.context_tokens:5d} "
            f"prefill {pre} meas {own * 1e3:7.1f} pred {m.step_time(sh) * 1e3:7.1f} "
            f"({m.step_time(sh) / own - 1:+.0%}) wait {s['waiting']}"
        )
