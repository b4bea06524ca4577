"""`tune --ray`: trials as Ray tasks on a real (local) Ray cluster, a head and then a
second worker node started by the test (127.0.0.1 only, one CPU each, `ray start
--block` so that stopping the command stops its processes). Skipped without Ray (the
`ray` extra). Prints the speed-up of the same trials on two nodes vs one; the best
candidate must be the same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import AZURE_CODE, BURSTGUARD

from burstguard.core.engine.config import EngineConfig
from burstguard.core.engine.profile import Profile
from burstguard.procs import free_port
from burstguard.tune.objective import ClassSlos, EngineObjective
from burstguard.tune.search import best
from burstguard.tune.space import ENGINE_KNOBS, grid, parse_axes
from burstguard.workload.traces import load_workload

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(600)

RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}


def _node(args: list[str], temp_dir: str) -> subprocess.Popen[bytes]:
    argv = [RAY, "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
            "--disable-usage-stats", *args]  # fmt: skip
    if "--head" in args:
        argv += ["--temp-dir", temp_dir, "--include-dashboard", "false"]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()  # `ray start --block` stops the node's processes on SIGTERM
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_cpus(n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while ray.cluster_resources().get("CPU", 0) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"the Ray cluster never had {n} CPUs")
        time.sleep(0.5)


@pytest.fixture
def head() -> Iterator[str]:
    if not Path(RAY).exists():
        pytest.skip("the ray command is not installed next to this Python")
    temp_dir = tempfile.mkdtemp(prefix="/tmp/bgray")  # short: Ray's socket paths
    port = free_port()
    proc = _node(["--head", "--port", str(port)], temp_dir)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:  # the head takes a few seconds to answer
            try:
                ray.init(address=address, log_to_driver=False)
                break
            except ConnectionError:
                if proc.poll() is not None:  # Ray's own startup timeout, on a loaded host
                    pytest.skip(f"the local Ray head did not start (exit {proc.returncode})")
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        _wait_cpus(1)
        ray.shutdown()
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_trials_on_two_workers_find_the_same_best_faster(head: str) -> None:
    from burstguard.tune.ray_runner import RayRunner

    # the whole hour (8,819 requests, ~0.13 s a trial on the compiled build): trials long
    # enough that two workers beat one by more than Ray's per-task cost
    workload = load_workload(AZURE_CODE)
    objective = EngineObjective(workload, EngineConfig(), Profile.load("llama3-8b-h100"),
                                ClassSlos.parse("ttft=2,tpot=0.05"))  # fmt: skip
    axes = parse_axes(["max-num-seqs=4,16,64,256", "max-num-batched-tokens=2048,8192"],
                      ENGINE_KNOBS)  # fmt: skip
    candidates = [c for c in grid(axes) if objective.valid(c)][:8]
    ray.init(address=head, log_to_driver=False)
    with RayRunner(objective, head) as one:
        assert one.workers == 1
        one.run(candidates[:2])  # the worker process starts and imports burstguard
        t0 = time.perf_counter()
        on_one = one.run(candidates)
        wall_one = time.perf_counter() - t0
    worker = _node(["--address", head], "")
    try:
        _wait_cpus(2)
        with RayRunner(objective, head) as two:
            assert two.workers == 2
            two.run(candidates[:2])
            t0 = time.perf_counter()
            on_two = two.run(candidates)
            wall_two = time.perf_counter() - t0
    finally:
        ray.shutdown()
        _stop(worker)
    print(f"\n{len(candidates)} trials: {wall_one:.2f} s on 1 Ray worker, {wall_two:.2f} s on 2: "
          f"speed-up {wall_one / wall_two:.2f}x")  # fmt: skip
    assert [t.met for t in on_two] == [t.met for t in on_one]
    assert best(on_two).candidate == best(on_one).candidate


def test_tune_cli_with_ray_prints_the_winner(head: str, tmp_path: Path) -> None:
    """`burstguard tune --ray ADDRESS` end to end: the trace goes to the cluster once."""
    out = subprocess.run(
        [*BURSTGUARD, "tune", "--pattern", "poisson", "--rate", "5", "--duration", "60",
         "--axis", "max-num-seqs=4,16,64", "--budget", "4", "--ray", head],
        capture_output=True, text=True, timeout=240, env=ENV,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Ray task slot" in out.stdout and "chosen:" in out.stdout
