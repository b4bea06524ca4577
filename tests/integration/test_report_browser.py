"""The HTML report renders in a real browser: headless Chromium draws every plot, throws
no JavaScript error, fetches nothing, and the screenshot is not blank."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from burstguard.report.compare import compare
from burstguard.report.html import write_compare_report, write_run_report
from burstguard.wire.records import RequestRecord
from burstguard.wire.summary import summarize

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
JS_ERROR = re.compile(r"CONSOLE.*(Uncaught|Error)|Failed to load resource", re.IGNORECASE)


@pytest.fixture(scope="module")
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium missing in CI: `make system-deps` installs it")
        pytest.skip("chromium not installed (run `make system-deps` as root to install it)")
    return CHROMIUM


def browse(chromium: str, page: Path, tmp: Path, *mode: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    profile.mkdir()
    return subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            *mode,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


def js_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if JS_ERROR.search(line)]


def leg(ttft: float, n: int = 300, seed: int = 0) -> tuple[dict, list[RequestRecord]]:
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        t = float(rng.exponential(ttft))
        records.append(
            RequestRecord(
                id=f"r{i}",
                scheduled_s=i * 0.1,
                sent_s=i * 0.1 + 0.001,
                status=200,
                ttft_s=t,
                e2e_s=t + 1.0,
                itl_s=[0.02] * 50,
                prompt_tokens=200,
                completion_tokens=51,
                priority_class="interactive" if i % 10 < 7 else "batch",
            )
        )
    waiting = [max(0.0, 20 * np.sin(k / 3)) for k in range(30)]
    series = {
        "t": list(range(30)),
        'vllm:num_requests_waiting{model_name="m"}': waiting,
        'vllm:kv_cache_usage_perc{model_name="m"}': [w / 25 for w in waiting],
    }
    return summarize(records, duration_s=n * 0.1, extra={"server_series": series}), records


def test_error_detection_catches_a_broken_page(chromium: str, tmp_path: Path) -> None:
    """The check below is only worth something if it sees a JS error when there is one."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert js_errors(browse(chromium, page, tmp_path, "--dump-dom").stderr)


def test_compare_report_renders(chromium: str, tmp_path: Path) -> None:
    steady, steady_records = leg(0.1)
    burst, burst_records = leg(0.8, seed=1)
    verdict = compare(steady, burst, legs={"steady": "steady", "burst": "burst"})
    page = tmp_path / "report.html"
    write_compare_report(
        [("steady", steady, steady_records), ("burst", burst, burst_records)], verdict, page
    )
    text = page.read_text()
    # offline: no external script or stylesheet (plotly.js is inlined; a fetch attempt in
    # the browser would also show as "Failed to load resource" below)
    assert "<script src=" not in text and "<link" not in text

    dom = browse(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not js_errors(dom.stderr), js_errors(dom.stderr)
    for div in ("plot-rate", "plot-ttft", "plot-server", "plot-cdf"):
        assert f'id="{div}"' in dom.stdout
    assert dom.stdout.count('class="main-svg"') >= 8  # plotly drew each figure (2 svgs each)
    assert "FAIL" in dom.stdout and "By priority class" in dom.stdout

    shot = tmp_path / "shot.png"
    run = browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1400,2400")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = image.imread(str(shot))[..., :3]
    assert pixels.std() > 0.05  # not one flat colour
    # the trace colours (plotly blue and red legs) are on the page, so the plots have data
    blue = np.all(np.abs(pixels - np.array([31, 119, 180]) / 255) < 0.08, axis=-1).mean()
    red = np.all(np.abs(pixels - np.array([214, 39, 40]) / 255) < 0.08, axis=-1).mean()
    assert blue > 1e-4 and red > 1e-4, (blue, red)


def test_run_report_without_records_still_renders(chromium: str, tmp_path: Path) -> None:
    summary, _ = leg(0.2)
    page = tmp_path / "run.html"
    write_run_report(summary, [], page, title="summary only")
    dom = browse(chromium, page, tmp_path, "--dump-dom")
    assert not js_errors(dom.stderr), js_errors(dom.stderr)
    assert 'id="plot-rate"' in dom.stdout and 'id="plot-cdf"' not in dom.stdout
    assert dom.stdout.count('class="main-svg"') >= 6
