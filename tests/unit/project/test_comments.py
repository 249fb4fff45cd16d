"""Comments say why, never when (a dated figure lives in docs/measurements.md, with its conditions), and
nothing points outside the repository: a clone has only what git tracks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT

# How a comment says when something was done: a remembered or this-session figure, a date after "measured",
# "checked", "read" or "run", a date in parentheses or closing them, "the <date> run".
WHEN = re.compile(
    r"\b(as remembered|this session|as of 20\d\d)"
    r"|\b(measured|checked|read|run|seen|quoted it)\b(\s+\S+){0,3}?\s+(on\s+|in\s+|of\s+)?20\d\d-\d\d"
    r"|\([^()]*\b(rehearsal|run|answers)\b[^()]*\b20\d\d-\d\d|\(20\d\d-\d\d(-\d\d)?\)|,\s*20\d\d-\d\d-\d\d(\)|$)"
    r"|\bthe\s+20\d\d-\d\d-\d\d\s+(\S+\s+)?run\b",
    re.IGNORECASE,
)
# The sibling folder the project's notes live in; spelled in two pieces so this file does not name it.
OUTSIDE = re.compile(r"\.\./" + r"shared/|(?<![\w/])" + r"shared/(gpu-rehearsal|schemas)")


def _tracked(*suffixes: str, names: tuple[str, ...] = ()) -> list[Path]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / f for f in files if (f.endswith(suffixes) or Path(f).name in names) and (ROOT / f).exists()]


def _comment(line: str) -> str:
    return line[line.index("#") :].rstrip() if "#" in line else ""


def test_code_comments_say_why_not_when():
    dated = [
        f"{path.relative_to(ROOT)}:{n}: {_comment(line)}"
        for path in _tracked(".py", ".sh", names=("Makefile",))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WHEN.search(_comment(line))
    ]
    assert dated == []


def test_nothing_points_outside_the_repository():
    pointers = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _tracked(".py", ".sh", ".md", ".txt", ".yaml", ".toml", names=("Makefile", "run"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert pointers == []
