"""One rule for the cache root (ray_llm_eks/adapters/environment.py cache_dir): the Makefile, the e2e build, the
rehearsal, the load generator and the upstream checker all ask it, so a venv `make` builds is the one the Python code
looks for."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ray_llm_eks.adapters import environment
from tests.conftest import ROOT

RULE = ROOT / "ray_llm_eks" / "adapters" / "environment.py"
# What a second copy of the rule would spell: the variable's name or the default folder.
COPY = re.compile(r"RAY_LLM_EKS_CACHE\b|[\"']\.cache[\"']|\.cache/ray-llm-eks")


def _make_variable(name: str, env: dict[str, str]) -> str:
    show = f"show-variable: ; @echo $({name})"
    run = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", show, "show-variable"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip()


def _make_cache_dir(env: dict[str, str]) -> str:
    return _make_variable("CACHE_DIR", env)


def test_make_and_the_python_code_name_the_same_cache_root(tmp_path, monkeypatch):
    monkeypatch.delenv(environment.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from go_binaries import build

    assert environment.cache_dir() == tmp_path / "ray-llm-eks"
    assert build.cache_root() == environment.cache_dir() / "e2e"
    env = {k: v for k, v in os.environ.items() if k != "CACHE_DIR"}
    assert _make_cache_dir(env) == str(environment.cache_dir())
    assert _make_cache_dir({**env, environment.CACHE_ENV: str(tmp_path / "own")}) == str(tmp_path / "own")


def test_make_and_the_load_generator_name_the_same_venv(tmp_path, monkeypatch):
    monkeypatch.setenv(environment.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv("RAY_LLM_EKS_BENCH_VENV", raising=False)
    from llmclient import aiperf

    monkeypatch.setattr(aiperf, "CACHE", environment.cache_dir())
    env = {k: v for k, v in os.environ.items() if k != "CACHE_DIR"}
    assert _make_variable("BENCH_VENV", env) == str(aiperf.bench_venv())


def test_the_makefile_names_its_venvs_and_hands_the_bench_venv_over_once():
    """One rule names every pinned venv (a hash of its requirements), and one line hands the load generator's
    venv to llmclient, so a target added later cannot spell either differently."""
    makefile = (ROOT / "Makefile").read_text()
    assert makefile.count("sha256sum") == 1
    assert makefile.count("RAY_LLM_EKS_BENCH_VENV") == 1


def test_no_other_file_spells_the_cache_root_rule():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    sources = [ROOT / f for f in tracked if f.endswith(".py") or f in ("Makefile", ".ci/run")]
    copies = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sources
        if path != RULE and not path.is_relative_to(ROOT / "tests") and path.exists()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if COPY.search(line) and (path.name == "Makefile" or not line.lstrip().startswith("#"))
    ]
    assert copies == []


def test_the_e2e_build_runs_on_the_standard_library_alone():
    """.ci/run starts it with the system python3 before any venv exists; -S: no site-packages."""
    run = subprocess.run(
        [sys.executable, "-S", "-c", "import go_binaries.build; print(go_binaries.build.cache_root())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("e2e")
