"""What the scripts share: the step-logged vLLM-CPU server the run scripts start and the
legs they mark in its marks.txt; for the replay scripts, the fit a run is replayed
through, a run's logged steps (`sitecustomize.py`'s steps.jsonl) and its legs."""

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from burstguard.core.engine.perf_model import BatchShape, PerfModel
from burstguard.core.engine.profile import Profile
from burstguard.engines import vllm_cpu
from burstguard.procs import ManagedProcess

MACHINE_FIT = Path.home() / ".cache/burstguard/profiles/smollm2-135m-cpu.yaml"


def logged_server(out: Path) -> ManagedProcess:
    """vLLM-CPU with the fidelity legs' settings, its steps logged to OUT/steps.jsonl
    (`sitecustomize.py`, which its processes load through PYTHONPATH)."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ["STEPLOG_PATH"] = str(out / "steps.jsonl")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")])
    )
    return vllm_cpu.server(
        startup_timeout_s=400.0, max_num_seqs=32, max_model_len=2048, log_path=out / "vllm.log"
    )


@contextmanager
def leg(out: Path, name: str) -> Iterator[None]:
    """Marks a leg in OUT/marks.txt: a name line as it starts, an end line after (`legs`)."""
    with (out / "marks.txt").open("a") as marks:
        marks.write(f"{name}\t{time.time()}\n")
    yield
    with (out / "marks.txt").open("a") as marks:
        marks.write(f"end\t{time.time()}\n")


def fitted(path: Path = MACHINE_FIT) -> PerfModel:
    """The step model of a profile (by default this machine's automatic fit)."""
    return Profile.load(path).perf


def steps(run: Path) -> list[dict]:
    return [x for x in map(json.loads, (run / "steps.jsonl").open()) if "ts" in x]


def legs(run: Path) -> list[tuple[str, float, float]]:
    """(name, start, end) of each leg: marks.txt holds a name line, then an end line."""
    marks = [line.rstrip("\n").split("\t") for line in (run / "marks.txt").open()]
    return [(marks[i][0], float(marks[i][1]), float(marks[i + 1][1]))
            for i in range(0, len(marks), 2)]  # fmt: skip


def decodes(req: list) -> bool:
    """A logged request entry [scheduled, computed, prompt, outputs, ...] that decodes."""
    n, c, p, o = req[:4]
    return n == 1 and o > 0 and c == p + o - 1


def is_decode(step: dict) -> bool:
    """A pure decode step."""
    return all(decodes(r) for r in step["r"])


def shape(step: dict) -> BatchShape:
    """A logged step's shape, as the emulator's scheduler would hand it to the model."""
    pre = dec = ctx = pseq = 0
    for r in step["r"]:
        n, c = r[0], r[1]
        ctx += c
        if decodes(r):
            dec += 1
        else:
            pre += n
            pseq += c == 0
    return BatchShape(pre, dec, ctx, 0, pseq)
