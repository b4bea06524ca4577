"""The packaged GPU profiles against the kernel data they were fitted on: the figures in
docs/fidelity.md (GPU section). Prints, per kernel_fit profile, its fitted values, the fit
error per regime, the profile's linear ops vs the measured per-op sums at powers of two,
and its decode and prefill steps for Llama-3-8B next to the public and roofline figures.

    python benchmarks/gpu_profiles.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from burstguard.calibrate.kernels import KernelTable, read_table, scale_table
from burstguard.core.engine.kernel_model import KernelModel
from burstguard.core.engine.perf_model import BatchShape
from burstguard.core.engine.profile import Profile, list_profiles


def _table(profile: Profile) -> KernelTable:
    kf = profile.data.kernel_fit
    assert kf is not None
    tables = [read_table(k["file"], kf.tensor_parallel) for k in kf.provenance["kernels"]]
    table = scale_table(*tables) if len(tables) == 3 else tables[0]
    return table.upto(profile.max_model_len)


def _decode(batch: int, ctx: int) -> BatchShape:
    return BatchShape(0, batch, batch * ctx, batch * (ctx + 1))


def _prefill(n: int) -> BatchShape:
    return BatchShape(n, 0, 0, n * (n + 1) // 2, 1)


def main() -> None:
    for name in list_profiles():
        profile = Profile.load(name)
        kf, perf = profile.data.kernel_fit, profile.perf
        if kf is None or not isinstance(perf, KernelModel):
            continue
        print(f"\n{name} (TP {kf.tensor_parallel}; fitted on {kf.provenance['fitted_on']})")
        print(f"  mem_efficiency {kf.mem_efficiency:.3f}  compute_efficiency "
              f"{kf.compute_efficiency:.3f}  knee {kf.knee:.2f}  elementwise "
              f"{kf.elementwise_s * 1e3:.3f} ms + {kf.activation_bytes_per_token / 1e6:.2f} "
              "MB/token")  # fmt: skip
        for regime, e in kf.provenance["fit_error"].items():
            print(f"  {regime:7} {e['num_tokens'][0]}-{e['num_tokens'][1]}: smooth median "
                  f"{e['smooth_median_rel_error']:.1%} max {e['smooth_max_rel_error']:.1%}; "
                  f"between rows median {e['held_out_median_rel_error']:.1%} max "
                  f"{e['held_out_max_rel_error']:.1%}")  # fmt: skip
        if kf.provenance["fitted_on"] == profile.data.hardware.name:  # type: ignore[union-attr]
            table = _table(profile)
            sums = table.total_s(profile.shape().num_layers)
            measured = dict(zip(table.num_tokens.tolist(), sums, strict=True))
            cells = []
            for n in (1, 8, 32, 128, 256, 512, 1024, 2048, 4096):
                if n in measured:
                    got = perf.linear.time(n)
                    cells.append(f"{n}: {measured[n] * 1e3:.2f}/{got * 1e3:.2f}")
            print("  linear ops, measured/profile ms: " + ", ".join(cells))
        steps = [f"decode b={b} ctx {c}: {perf.step_time(_decode(b, c)) * 1e3:.2f} ms"
                 for b, c in ((1, 128), (10, 1024), (64, 1024))]  # fmt: skip
        steps += [f"prefill {n}: {perf.step_time(_prefill(n)) * 1e3:.1f} ms" for n in (1024, 2048)]
        print("  " + "; ".join(steps))
    if len(sys.argv) > 1:  # old profile files to compare against, e.g. from git show main:...
        for path in sys.argv[1:]:
            old = Profile.load(Path(path))
            print(f"\n{path}: decode b=1 ctx 128 {old.step_time(_decode(1, 128)) * 1e3:.2f} ms; "
                  f"prefill 1024 {old.step_time(_prefill(1024)) * 1e3:.1f} ms, 2048 "
                  f"{old.step_time(_prefill(2048)) * 1e3:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
