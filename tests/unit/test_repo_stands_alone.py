"""A user's clone has nothing beside it: no file of the project may point outside it.

Checked: relative paths that climb above the repository root (`../` in a Markdown link or
a config file such as kustomize's resolved from the file that holds it; anywhere else, as
in a command, from the root where the user runs it), and Python code that climbs from
`__file__` or from a repo-root variable to the folder above. CI runs in a fresh clone in
an empty directory too; this test says which line broke the rule before CI would.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKED = (
    "src",
    "tests",
    "benchmarks",
    "docs",
    "examples",
    "deploy",
    ".ci",
    "Makefile",
    "README.md",
)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".json", ".cfg", ""}
UP_PATH = re.compile(r"(?<![\w./])((?:\.\./)+)[\w.-]")
LINK_START = "]("
FILE_RELATIVE = {".yaml", ".yml", ".toml", ".json"}  # kustomize & co. resolve from the file
FILE_PARENTS = re.compile(
    r"__file__\)(?:\.resolve\(\))?((?:\.parent)+)(?!s)|__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]"
)
ROOT_PARENT = re.compile(r"\b\w*ROOT\.parent\b")


def tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *CHECKED], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    names = [n for n in out.decode().split("\0") if n]
    return [REPO_ROOT / n for n in names if Path(n).suffix in TEXT_SUFFIXES]


def escapes(path: Path, text: str) -> list[str]:
    """Each way `text` (the content of `path`) reaches above the repository root."""
    found: list[str] = []
    for m in UP_PATH.finditer(text):
        in_link = path.suffix == ".md" and text[: m.start()].endswith(LINK_START)
        from_file = in_link or path.suffix in FILE_RELATIVE
        target = ((path.parent if from_file else REPO_ROOT) / m.group(1)).resolve()
        if not target.is_relative_to(REPO_ROOT):
            found.append(f"'{m.group(0)}...' climbs above the root")
    if path.suffix == ".py":
        depth = len(path.relative_to(REPO_ROOT).parts) - 1  # parents[depth] is the root
        for m in FILE_PARENTS.finditer(text):
            up = m.group(1).count(".parent") - 1 if m.group(1) else int(m.group(2))
            if up > depth:
                found.append(f"'{m.group(0)}' climbs above the root")
        found += [
            f"'{m.group(0)}' is the folder above the root" for m in ROOT_PARENT.finditer(text)
        ]
    return found


def test_no_file_points_outside_the_repository() -> None:
    offences = []
    for path in tracked_files():
        if path == Path(__file__).resolve():
            continue  # the rule's own examples, below
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for line_no, line in enumerate(text.splitlines(), 1):
            offences += [
                f"{path.relative_to(REPO_ROOT)}:{line_no}: {e}" for e in escapes(path, line)
            ]
    assert not offences, "paths outside the repository:\n" + "\n".join(offences)


def test_the_check_sees_each_way_out() -> None:
    """The rule itself: each form of escape is caught, paths inside the repository are not."""
    doc = REPO_ROOT / "docs" / "x.md"
    assert escapes(doc, "see [design](../../shared/DESIGN.md)")
    assert not escapes(doc, "see [deploy](../deploy/README.md)")
    assert escapes(doc, "run `burstguard analyze ../shared/traces/x.csv`")  # from the root
    readme = REPO_ROOT / "README.md"
    assert escapes(readme, "See `../shared/DESIGN.md`")
    bench = REPO_ROOT / "benchmarks" / "b.py"
    assert escapes(bench, 'T = Path(__file__).resolve().parents[2] / "shared"')
    assert not escapes(bench, 'T = Path(__file__).resolve().parents[1] / "examples"')
    assert escapes(bench, 'T = Path(__file__).resolve().parent.parent.parent / "shared"')
    assert not escapes(bench, "T = Path(__file__).resolve().parent.parent")
    assert escapes(bench, 'T = REPO_ROOT.parent / "shared" / "traces"')
