"""The GPU machine has no botocore (tools/gpu/wheels.txt leaves it out): make verify and the bench must still read
the stack there, from the facts file `make gpu-wheels` ships, and say in one line what is missing without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapters import botocore_facts

ROOT = Path(__file__).resolve().parents[2]

# botocore neither importable nor known to importlib.metadata, as on a machine that never installed it.
WITHOUT_BOTOCORE = """
import importlib.metadata, sys
sys.modules["botocore"] = None
real_version = importlib.metadata.version
def version(name):
    if name == "botocore":
        raise importlib.metadata.PackageNotFoundError(name)
    return real_version(name)
importlib.metadata.version = version
from adapters import stack
from llmclient.bench import stack_facts
settings = stack.load_settings(stack.stack_file("dev"))
print(settings.serving.namespace, stack_facts("dev")["namespace"])
"""


def _run(cache: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "RAY_LLM_EKS_CACHE": str(cache), "RAY_LLM_EKS_TODAY": "2026-12-02"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_BOTOCORE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def facts_json() -> str:
    botocore_facts.load()
    return botocore_facts.cache_file().read_text()


def test_without_botocore_the_shipped_facts_file_stands_for_it(tmp_path, facts_json):
    (tmp_path / "botocore-facts-1.0.0.json").write_text(facts_json)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["llm", "llm"]


def test_without_botocore_or_its_facts_one_line_says_what_is_missing(tmp_path, facts_json):
    done = _run(tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "NoBotocoreFacts: botocore is not installed" in last and "found: none" in last
    # Two versions' facts: which one stands for the missing botocore is not guessed.
    for name in ("botocore-facts-1.0.0.json", "botocore-facts-2.0.0.json"):
        (tmp_path / name).write_text(json.dumps(json.loads(facts_json)))
    assert "found: botocore-facts-1.0.0.json, botocore-facts-2.0.0.json" in _run(tmp_path).stderr
