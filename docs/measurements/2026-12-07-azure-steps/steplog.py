"""What the replay scripts share: the fit a run is replayed through, a run's logged steps
(`sitecustomize.py`'s steps.jsonl) and the legs marked in its marks.txt."""

import json
from pathlib import Path

from burstguard.core.engine.perf_model import BatchShape, PerfModel
from burstguard.core.engine.profile import Profile

MACHINE_FIT = Path.home() / ".cache/burstguard/profiles/smollm2-135m-cpu.yaml"


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
