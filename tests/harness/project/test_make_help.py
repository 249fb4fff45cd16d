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


def _planned(target: str) -> str:
    """What `make <target> STACK=dev` would run (-n: printed, nothing run)."""
    done = subprocess.run(["make", "-n", target, "STACK=dev"], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def test_make_up_and_make_preview_run_the_policy_pack():
    """The pack `make policy` runs offline refuses at deploy too: `pulumi up` without it would not."""
    assert re.search(r"^pulumi up --stack dev --policy-pack policy$", _planned("up"), re.M)
    assert re.search(r"^pulumi preview --diff --stack dev --policy-pack policy$", _planned("preview"), re.M)
