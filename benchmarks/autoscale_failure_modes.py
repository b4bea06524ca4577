"""Figures for docs/autoscaling.md: the seed's scaling failure modes, before and after.

Runs the constructed workloads of tests/unit/test_autoscale_failure_modes.py (a fluid
queue in front of the policy + fleet state machine; one replica serves MU requests/s)
with the failing and the recommended settings, and prints one row per run. Takes about
two seconds: `python benchmarks/autoscale_failure_modes.py`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from burstguard.core.scaling import load_policy
from burstguard.core.scaling.hpa import ScalingRules

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "unit"))

from test_autoscale_failure_modes import (  # type: ignore[import-not-found]
    Run,
    bursts_every_15_min,
    diurnal,
    keda,
    on_off,
    predictive,
    run,
    square_wave,
    step,
)


def row(name: str, r: Run, window: tuple[int, int] | None = None, arrivals: float = 0) -> None:
    q = r.queue_seconds(*window) if window else r.queue_seconds()
    wait = f" mean_wait={q / arrivals:5.1f}s" if arrivals else ""
    fleet = max(a + b for a, b in zip(r.ready, r.starting, strict=True))
    print(
        f"{name:42s} replica_s={r.replica_seconds:7.0f} idle_s={r.idle_replica_seconds():7.0f}"
        f" queue_s={q:10.0f} flaps={r.flaps():3d} orders_while_starting="
        f"{r.orders_while_starting:2d} max_fleet={fleet}{wait}"
    )


def main() -> None:
    b3 = sum(bursts_every_15_min(t) for t in range(2100, 2400))
    lag = {
        "lag: keda-queue min 2": keda("keda-queue", min_replicas=2),
        "lag: static 6": keda("keda-queue", min_replicas=6, max_replicas=6),
        "lag: predictive season 900": predictive(
            min_replicas=2, season_s=900, burst_window_s=60, scale_down_window_s=120
        ),
    }
    for name, policy in lag.items():
        r = run(policy.with_overrides(cold_start_s=180), bursts_every_15_min, 3600)
        row(name + " (burst 3)", r, (2100, 2400), b3)
    base = load_policy("keda-rate")
    assert base.keda is not None
    down = base.keda.behavior.scale_down
    for window in (0, 120, 300):
        rules = ScalingRules(window, down.policies, down.select_policy, down.tolerance)
        behavior = replace(base.keda.behavior, scale_down=rules)
        policy = keda("keda-rate", behavior=behavior).with_overrides(cold_start_s=30)
        row(f"flap: keda-rate scale-down window {window}s", run(policy, square_wave, 3600))
    for cooldown in (0, 300):
        policy = keda("keda-rate", min_replicas=0, cooldown_period_s=cooldown)
        r = run(policy.with_overrides(cold_start_s=30), on_off, 3600, initial=1)
        row(f"flap to zero: cooldownPeriod {cooldown}s", r)
    row(
        "cascade: keda-queue",
        run(load_policy("keda-queue").with_overrides(cold_start_s=180), step, 900),
    )
    row("cascade: predictive", run(predictive().with_overrides(cold_start_s=180), step, 900))
    day = sum(diurnal(t) for t in range(7200))
    idle = {
        "idle: keda-queue min = max = 6": keda("keda-queue", min_replicas=6, max_replicas=6),
        "idle: keda-queue min 1": keda("keda-queue", min_replicas=1),
        "idle: predictive min 1": predictive(min_replicas=1),
    }
    for name, policy in idle.items():
        row(name, run(policy, diurnal, 7200), arrivals=day)


if __name__ == "__main__":
    main()
