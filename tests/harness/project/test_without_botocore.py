"""`make verify` and the bench on a machine without botocore (the GPU machine: tools/gpu/wheels.txt leaves it
out): they read the facts a machine with botocore cached (tools/gpu/device.sh carries them there), and say in
one line what to do when there are none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest

from ray_llm_eks.adapters import botocore_facts
from tests.conftest import ROOT

# In the child: botocore cannot be imported and has no package metadata; then what verify and bench load.
CHILD = """
import importlib.metadata, importlib.util, sys
assert importlib.util.find_spec("botocore") is None, "botocore importable"
try:
    importlib.metadata.version("botocore")
    sys.exit("botocore has package metadata")
except importlib.metadata.PackageNotFoundError:
    pass
from ray_llm_eks.adapters import stack
from llmclient import bench
settings = stack.load_settings(stack.stack_file("dev", bench.ROOT))
facts = bench.stack_facts("dev")
print("loaded", settings.stack, facts["pd"], len(settings.serving.serve_document.applications))
"""


@pytest.fixture(scope="module")
def no_botocore_path(tmp_path_factory) -> Path:
    """The venv's packages without botocore: links to every entry of site-packages but botocore's."""
    folder = tmp_path_factory.mktemp("site")
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.lower().startswith("botocore"):
            (folder / entry.name).symlink_to(entry)
    return folder


def run_child(site: Path, cache: Path, code: str = CHILD) -> subprocess.CompletedProcess:
    # -S: no site-packages (nor its .pth files); PYTHONPATH gives the linked copy without botocore.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env |= {"PYTHONPATH": f"{ROOT}{os.pathsep}{site}", "RAY_LLM_EKS_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_verify_and_bench_load_the_stack_from_carried_facts(no_botocore_path, tmp_path):
    carried = botocore_facts.read_botocore()  # what a machine with botocore wrote into its cache
    (tmp_path / f"botocore-facts-{version('botocore')}.json").write_text(json.dumps(carried))
    done = run_child(no_botocore_path, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "loaded dev True 1"


def test_without_botocore_or_carried_facts_it_is_one_line(no_botocore_path, tmp_path):
    code = "from llmclient import verify\nimport argparse\n" + (
        "args = argparse.Namespace(stack='dev', served_config=None, floor_gbps=None)\nsys.exit(verify.main(args))"
    )
    done = run_child(no_botocore_path, tmp_path, "import sys\n" + code)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("VERIFY FAILED: botocore is not installed") and "pip install botocore" in line


def test_the_plan_still_reads_botocore_where_it_is_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_LLM_EKS_CACHE", str(tmp_path))
    (tmp_path / "botocore-facts-0.0.1.json").write_text(json.dumps({"stale": True}))  # never read here
    assert botocore_facts._cached_json() == botocore_facts.read_botocore()
    assert botocore_facts.cache_file().exists()
