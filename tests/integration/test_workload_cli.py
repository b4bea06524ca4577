"""`burstguard analyze` / `generate` end to end on the real traces, and bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import AZURE_CODE, BURSTGUARD, MOONCAKE_CONV, REPO_ROOT

from burstguard.workload.traces import load_workload, write_workload

EXAMPLE = REPO_ROOT / "examples" / "traces" / "azure2023_code.csv"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BURSTGUARD, *args], capture_output=True, text=True, timeout=120)


def test_analyze_azure_code_trace(traces_dir: Path) -> None:
    proc = run("analyze", str(AZURE_CODE), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["requests"] == 8819
    assert r["mean_rate_rps"] == pytest.approx(2.57, rel=0.03)
    assert r["peak_to_average"]["1s"] == pytest.approx(26.1, rel=0.03)
    assert r["interarrival_cv"] == pytest.approx(13.15, rel=0.03)
    assert set(r["peak_to_average"]) == {"1s", "5s", "10s", "60s"}
    for key in ("duration_s", "hurst", "gamma_shape"):
        assert r[key] is not None
    assert r["input_tokens"]["p50"] == pytest.approx(1469)
    assert r["verdict"] == "bursty"


def test_mooncake_trace_token_stats(traces_dir: Path) -> None:
    proc = run("analyze", str(MOONCAKE_CONV), "--json")
    r = json.loads(proc.stdout)
    assert r["requests"] == 12031
    assert r["input_tokens"]["mean"] == pytest.approx(12035, rel=0.01)
    assert r["input_tokens"]["p50"] == pytest.approx(6909, rel=0.01)
    assert r["output_tokens"]["mean"] == pytest.approx(343, rel=0.01)
    assert r["output_tokens"]["p50"] == pytest.approx(350, rel=0.01)
    w = load_workload(MOONCAKE_CONV)
    assert w.prefix_hashes is not None and len(w.prefix_hashes[0]) > 0


def test_generate_then_analyze_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "burst.jsonl"
    proc = run(
        "generate",
        "burst",
        "--rate",
        "4",
        "--duration",
        "300",
        "--seed",
        "3",
        "--classes",
        "interactive=0.7,batch=0.3",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    w = load_workload(out)
    assert set(w.priority_class) == {"interactive", "batch"}
    again = tmp_path / "again.jsonl"
    write_workload(again, w)
    w2 = load_workload(again)
    assert np.array_equal(w.arrival_s, w2.arrival_s)
    assert list(w.priority_class) == list(w2.priority_class)
    assert list(w.prompt_tokens) == list(w2.prompt_tokens)
    r = json.loads(run("analyze", str(out), "--json").stdout)
    assert r["verdict"] == "bursty"


def test_plot_png_and_html(tmp_path: Path) -> None:
    for name in ("p.png", "p.html"):
        proc = run("analyze", str(EXAMPLE), "--plot", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / name).stat().st_size > 10_000
    assert "<script" in (tmp_path / "p.html").read_text()


def test_burstgpt_csv_keeps_failed_rows(tmp_path: Path) -> None:
    path = tmp_path / "burstgpt.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0,ChatGPT,100,20,120,Conversation log\n"
        "1.5,GPT-4,300,0,300,Conversation log\n"
        "3,ChatGPT,50,10,60,API log\n"
    )
    w = load_workload(path)
    assert len(w) == 3
    assert list(w.prompt_tokens) == [100, 300, 50]
    assert w.failed is not None and list(w.failed) == [False, True, False]


@pytest.mark.parametrize(
    ("content", "expect"),
    [("", "empty"), ("hello world\nfoo\n", "unrecognised")],
)
def test_bad_files_exit_2_without_traceback(tmp_path: Path, content: str, expect: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content)
    proc = run("analyze", str(path))
    assert proc.returncode == 2
    assert expect in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,oops,13\n"
    )
    proc = run("analyze", str(path))
    assert proc.returncode == 2
    assert f"{path}:3" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_generate_bad_pattern_exit_2(tmp_path: Path) -> None:
    proc = run("generate", "nope", "--out", str(tmp_path / "x.jsonl"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--rate", "inf"), "--rate must be a finite number > 0 (got inf)"),
        (("--duration", "nan"), "--duration must be a finite number > 0 (got nan)"),
        (("--burstiness", "nan"), "--burstiness must be a finite number > 0 (got nan)"),
        (("--rate", "1e9", "--duration", "1e9"), "asks for ~1e+18 requests"),
        (("--classes", "a=nan,b=1"), "bad mix 'a=nan,b=1'"),
    ],
)
def test_generate_non_finite_or_huge_numbers_exit_2(
    tmp_path: Path, args: tuple[str, ...], expect: str
) -> None:
    """The command line reads nan and inf as floats, and `x <= 0` lets nan through: each
    was a traceback (ZeroDivisionError, OverflowError, a 7 EiB allocation, numpy's NaN
    probabilities) or a silent nonsense run."""
    proc = run("generate", "gamma", "--rate", "2", "--duration", "5", *args,
               "--out", str(tmp_path / "x.jsonl"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert expect in proc.stderr and "Traceback" not in proc.stderr


def test_an_output_path_that_cannot_be_written_exit_2(tmp_path: Path) -> None:
    """A file where a directory should be: one line naming the path, not a traceback."""
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "x.jsonl"
    proc = run("generate", "poisson", "--rate", "2", "--duration", "5", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and str(tmp_path / "afile") in proc.stderr
