"""Bad input to the commands is refused at once, before any long run or server start, with
one line naming the flag (exit 2): never a traceback, never results computed and lost."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.conftest import BURSTGUARD

PATTERN = ["--pattern", "poisson", "--rate", "2", "--duration", "5", "--profile", "instant"]
FLEET = ["fleet", "--policy", "keda-queue", "--max-replicas", "1", "--cold-start-s", "0"]


def refused(args: list[str], *needles: str) -> None:
    res = subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "Traceback" not in out, out
    for needle in needles:
        assert needle in out, out


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A path whose folder is a file: it cannot be created, even by root."""
    (tmp_path / "afile").write_text("")
    return tmp_path / "afile" / "out.json"


def test_tune_refuses_an_unwritable_json_before_searching(blocked: Path) -> None:
    """It used to search, print the winner, then die on the write with a traceback."""
    refused(["tune", *PATTERN, "--axis", "max-num-seqs=8,16", "--json", str(blocked)],
            f"--json {blocked}: cannot write it")  # fmt: skip


def test_sim_refuses_unwritable_outputs_before_simulating(blocked: Path) -> None:
    refused(["sim", *PATTERN, "--records", str(blocked)], f"--records {blocked}: cannot write")
    refused(["sim", *PATTERN, "--json", str(blocked)], f"--json {blocked}: cannot write")


def test_fleet_refuses_a_bad_gateway_url_duration_or_output(tmp_path: Path, blocked: Path) -> None:
    """Each of these used to start emulators: `--gateway notaurl` ran the fleet blind, a
    negative --duration ran it not at all (exit 0), an unwritable --file or --json was a
    traceback (the books lost at the end)."""
    backends = str(tmp_path / "backends.txt")
    gw = ["--gateway", "http://127.0.0.1:9"]
    refused([*FLEET, "--gateway", "notaurl", "--file", backends], "--gateway: 'notaurl'")
    refused([*FLEET, *gw, "--file", backends, "--duration", "-1"], "--duration must be > 0")
    refused([*FLEET, *gw, "--file", str(blocked)], f"--file {blocked}: cannot write")
    refused([*FLEET, *gw, "--file", backends, "--duration", "1", "--json", str(blocked)],
            f"--json {blocked}: cannot write")  # fmt: skip
    assert not (tmp_path / "backends.txt").exists()  # the checks leave nothing behind


def test_emulate_refuses_a_port_out_of_range_and_a_speedup_that_is_not_a_number() -> None:
    """`--port 99999` printed its banner and served on no port it named; `--speedup nan`
    served at "nanx" (`x <= 0` lets nan through)."""
    refused(["emulate", "--port", "99999"], "--port")
    refused(["emulate", "--speedup", "nan"], "--speedup must be a finite number > 0 (got nan)")
    refused(["emulate", "--speedup", "inf"], "--speedup must be a finite number > 0 (got inf)")


def test_sim_refuses_a_fleet_it_cannot_start_and_a_cold_start_that_never_ends(
    tmp_path: Path,
) -> None:
    """`--min-replicas 100000` started 100,000 engine cores (a minute later, still
    starting); `--cold-start-s inf` or nan, or `cold_start: .inf` in a policy file,
    simulated replicas that never serve, exit 0; `target: .nan` was a traceback."""
    scaled = ["sim", *PATTERN, "--autoscaler", "keda-queue"]
    refused([*scaled, "--min-replicas", "100000", "--max-replicas", "100000"],
            "the simulation starts at most 1024 replicas")  # fmt: skip
    for bad in ("inf", "nan"):
        refused(
            [*scaled, "--cold-start-s", bad], f"--cold-start-s must be finite and >= 0 (got {bad})"
        )
    policy = tmp_path / "policy.yaml"
    policy.write_text("kind: keda\ncold_start: .inf\n"
                      "keda: {query: {metric: llm_request_queue_depth}, target: 5}\n")  # fmt: skip
    refused(["sim", *PATTERN, "--autoscaler", str(policy)], "cold_start: must be a finite number")
    policy.write_text(
        "kind: keda\nkeda: {query: {metric: llm_request_queue_depth}, target: .nan}\n"
    )
    refused(["sim", *PATTERN, "--autoscaler", str(policy)],  # was a ValueError traceback
            "keda.target: must be a finite number (got nan)")  # fmt: skip


def test_fleet_says_when_the_gateway_it_scales_on_is_unreachable(tmp_path: Path) -> None:
    """It ran blind in silence: the policy saw no load and nobody was told why."""
    res = subprocess.run(
        [*BURSTGUARD, *FLEET, "--gateway", "http://127.0.0.1:9", "--duration", "1.5",
         "--file", str(tmp_path / "backends.txt")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("gateway http://127.0.0.1:9/metrics unreachable") == 1, res.stderr


def test_calibrate_refuses_an_unwritable_profile_before_probing(blocked: Path) -> None:
    """It probed the engine for minutes, then failed on the write."""
    refused(["calibrate", "--target", "http://127.0.0.1:9", "--out", str(blocked)],
            f"--out {blocked}: cannot write it")  # fmt: skip


def test_start_at_must_be_a_unix_time_to_come(tmp_path: Path) -> None:
    """`--start-at inf` waited for ever for time zero, nan went on as a schedule of nans;
    one check for bench and fleet."""
    bench = ["bench", "--target", "http://127.0.0.1:9", "--pattern", "poisson", "--rate", "1",
             "--duration", "1", "--out", str(tmp_path / "run")]  # fmt: skip
    for bad in ("inf", "nan"):
        refused([*bench, "--start-at", bad], f"--start-at {bad}: not a Unix time")
    refused([*bench, "--start-at", "1"], "--start-at 1.0: that time has passed")
    refused([*FLEET, "--gateway", "http://127.0.0.1:9", "--file", str(tmp_path / "b.txt"),
             "--start-at", "nan"], "--start-at nan: not a Unix time")  # fmt: skip
