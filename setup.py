"""Optional native build: the simulator's and the engine/gateway cores' hot modules
compiled with mypyc (issue 34: the same code, ~2x faster; docs/measurements/
2026-12-07-sim-scale-2.md).

Off unless BURSTGUARD_MYPYC=1, so that `pip install` needs no compiler; `make venv` runs
`make compiled`, which builds them in place next to their sources
(`BURSTGUARD_MYPYC=1 python setup.py build_ext --inplace`). An extension module takes
precedence over the .py beside it; without the .so files the same modules run as plain
Python. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

# Whatever cProfile shows per simulated step and request; each module here is plain,
# fully typed Python that mypyc compiles as is. A class defined here cannot be subclassed
# by interpreted code, so subclasses of these classes must be compiled here too.
COMPILED = [
    "src/burstguard/core/engine/core.py",
    "src/burstguard/core/engine/kernel_model.py",
    "src/burstguard/core/engine/kv_cache.py",
    "src/burstguard/core/engine/perf_model.py",
    "src/burstguard/core/engine/queue.py",
    "src/burstguard/core/engine/request.py",
    "src/burstguard/core/engine/scheduler.py",
    "src/burstguard/core/fleet/fleet.py",
    "src/burstguard/core/fleet/health.py",
    "src/burstguard/core/fleet/names.py",
    "src/burstguard/core/fleet/retry_budget.py",
    "src/burstguard/core/fleet/router.py",
    "src/burstguard/core/fleet/state.py",
    "src/burstguard/core/gateway/admission.py",
    "src/burstguard/core/gateway/core.py",
    "src/burstguard/core/gateway/events.py",
    "src/burstguard/core/gateway/policies.py",
    "src/burstguard/core/gateway/predictor.py",
    "src/burstguard/core/gateway/queue.py",
    "src/burstguard/core/gateway/request.py",
    "src/burstguard/sim/gateway_loop.py",
    "src/burstguard/sim/heap.py",
    "src/burstguard/sim/loop.py",
    "src/burstguard/sim/replicas.py",
]


def _ext_modules() -> list[Extension]:
    if os.environ.get("BURSTGUARD_MYPYC") != "1":
        return []
    from mypyc.build import mypycify

    # one shared library with a stable name (.gitignore'd, found by `make clean-compiled`)
    return mypycify(COMPILED, group_name="burstguard_native", opt_level="3")


setup(ext_modules=_ext_modules())
