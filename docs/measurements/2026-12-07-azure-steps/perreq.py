"""One-off: per-request TTFT / E2E, real leg vs emulated leg (same trace, same ids)."""

import json
import sys


def load(p):
    return {r["id"]: r for r in map(json.loads, open(p))}


a, b = load(sys.argv[1]), load(sys.argv[2])
ids = sorted(a, key=lambda i: a[i]["scheduled_s"])
for i in ids:
    r, e = a[i], b[i]
    print(
        f"{i:4s} t={r['scheduled_s']:6.2f} p={r['prompt_tokens']:4d} "
        f"out={r['completion_tokens']:3d} "
        f"ttft {r['ttft_s'] * 1e3:6.0f} vs {e['ttft_s'] * 1e3:6.0f} "
        f"({e['ttft_s'] / r['ttft_s'] - 1:+4.0%})  "
        f"e2e {r['e2e_s']:6.2f} vs {e['e2e_s']:6.2f} ({e['e2e_s'] / r['e2e_s'] - 1:+4.0%})"
    )
