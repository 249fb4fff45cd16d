"""A GPU kit knows which code its specs were rendered from (rehearsal/kit_source.py), and the GPU machine refuses a kit
made before that code changed: a stale spec once cost a hold eight minutes of engine start before its smoke failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rehearsal import kit_source
from tests.conftest import ROOT


def _tree(root: Path) -> Path:
    (root / "ray_llm_eks" / "serve_configs").mkdir(parents=True)
    (root / "ray_llm_eks" / "render.py").write_text("MAX_NUM_SEQS = 69\n")
    (root / "ray_llm_eks" / "serve_configs" / "pd.yaml").write_text("applications: []\n")
    (root / "Pulumi.dev.yaml").write_text("config: {}\n")
    return root


def test_a_kit_matches_the_code_it_was_rendered_from_and_no_other(tmp_path):
    root, kit = _tree(tmp_path / "repo"), tmp_path / "kit"
    kit.mkdir()
    kit_source.write(kit, root)
    assert kit_source.mismatch(kit, root) is None
    for changed in ("ray_llm_eks/render.py", "ray_llm_eks/serve_configs/pd.yaml", "Pulumi.dev.yaml"):
        before = (root / changed).read_text()
        (root / changed).write_text(before + "# changed\n")
        why = kit_source.mismatch(kit, root)
        assert why and "other code than this checkout's" in why and "make gpu-wheels KIT_ONLY=1" in why, changed
        (root / changed).write_text(before)
    assert kit_source.mismatch(kit, root) is None
    # Compiled files and other suffixes are not what a spec is rendered from.
    (root / "ray_llm_eks" / "__pycache__").mkdir()
    (root / "ray_llm_eks" / "__pycache__" / "render.cpython-311.pyc").write_bytes(b"\0")
    (root / "ray_llm_eks" / "notes.txt").write_text("x")
    assert kit_source.mismatch(kit, root) is None


def test_a_kit_without_the_digest_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rehearsal.kit_source", "check", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 3
    assert len(done.stderr.strip().splitlines()) == 1 and "predates this check" in done.stderr, done.stderr
