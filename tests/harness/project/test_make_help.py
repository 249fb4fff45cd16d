"""`make help` lists every target the README tells a user to run, each with its one-line summary."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT


def test_make_help_lists_every_target_the_readme_names():
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    summaries = dict(re.findall(r"^  make (\S+)\s+(.+)$", listed, re.M))
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", (ROOT / "README.md").read_text()))
    assert named - set(summaries) == set(), listed
    assert all(len(text) > 10 for text in summaries.values())
