"""Shared fixtures: the real program run offline under Pulumi mocks (offline/plan.py)."""

from __future__ import annotations

import ast
import gc
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ray_llm_eks.adapters.stackfile import stack_names

if TYPE_CHECKING:
    from offline.mocks import RecordingMonitor
    from offline.plan import Plan

ROOT = Path(__file__).resolve().parent.parent


def tracked_files(root: Path = ROOT) -> list[str] | None:
    """The files git tracks in this checkout (staged ones included); None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in listed.stdout.decode().split("\0") if name]


def shipped_stacks(root: Path = ROOT) -> list[str]:
    """The stack files the repository ships. A user's own `Pulumi.<name>.yaml` beside them is theirs to
    check with `make plan STACK=<name>`: the suite gives the same answer with or without it."""
    tracked = tracked_files(root)
    return [s for s in stack_names(root) if tracked is None or f"Pulumi.{s}.yaml" in tracked]


STACKS = shipped_stacks()
SHIPPED_STACKS = {"baseline", "dev", "prod"}  # tests may assert more about these
# The EKS support calendar is checked against "today": pin it so the suite gives the same answer
# every day (test_config checks the calendar itself with explicit dates).
os.environ["RAY_LLM_EKS_TODAY"] = "2026-11-30"


@pytest.fixture(scope="session")
def plans() -> dict[str, Plan]:
    """One offline run per shipped stack file."""
    from offline.plan import run_program  # here: the unit layer never imports the SDKs

    return {stack: run_program(stack) for stack in STACKS}


# The test layers, by directory: unit (the domain called directly), plan (a stack planned once per
# session, assertions on the plan), harness (the harnesses' own tests). `make test-fast` runs unit.
LAYERS = ("unit", "plan", "harness")
PROGRAM_FIXTURES = ("plans", "dev")  # fixtures that run the whole program under mocks
PROGRAM_CALLS = ("run_program", "failing_run")


def _layer(path: Path) -> str | None:
    parts = path.relative_to(Path(__file__).parent).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


# Within a layer a test file sits in the folder of the code it tests, named as in the repository: a folder of the
# package (domain/fit for ray_llm_eks/domain/fit) or a top-level one (rehearsal, offline); project/ holds the
# tests of the repository as a whole (its docs, its comments, the package it builds).
WHOLE_REPOSITORY = "project"


def _misplaced(path: Path) -> str | None:
    """Why a test file's folder names no code of the repository (None when it does)."""
    parts = path.relative_to(Path(__file__).parent).parts
    within = Path(*parts[1:-1]) if len(parts) > 2 else None
    if within is None:
        return f"{path.name}: directly in tests/{parts[0]}; put it in the folder of the code it tests"
    if within == Path(WHOLE_REPOSITORY) or (ROOT / "ray_llm_eks" / within).is_dir() or (ROOT / within).is_dir():
        return None
    return f"tests/{Path(*parts)}: {within}/ is no folder of ray_llm_eks/ or of the repository (or {WHOLE_REPOSITORY}/)"


def _program_calls(path: Path) -> set[str]:
    """The program runners a test module imports or calls."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
    return found & set(PROGRAM_CALLS)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark each test with its layer; a unit test that would run the program is a collection error."""
    wrong: dict[str, set[str]] = {}
    unplaced: set[str] = set()
    misplaced: set[str] = set()
    calls: dict[Path, set[str]] = {}
    for item in items:
        path = Path(str(item.fspath))
        layer = _layer(path)
        if layer is None:
            unplaced.add(path.name)
            continue
        item.add_marker(getattr(pytest.mark, layer))
        if why := _misplaced(path):
            misplaced.add(why)
        if layer == "unit":
            if path not in calls:
                calls[path] = _program_calls(path)
            runs = calls[path] | (set(getattr(item, "fixturenames", ())) & set(PROGRAM_FIXTURES))
            if runs:
                wrong.setdefault(item.nodeid, set()).update(runs)
    if unplaced:
        raise pytest.UsageError(f"a test file belongs in tests/unit, tests/plan or tests/harness: {sorted(unplaced)}")
    if misplaced:
        raise pytest.UsageError(f"a test file mirrors the code it tests: {'; '.join(sorted(misplaced))}")
    if wrong:
        listed = "; ".join(f"{node}: {sorted(names)}" for node, names in sorted(wrong.items()))
        raise pytest.UsageError(f"unit tests call the domain directly; move these to tests/plan: {listed}")


def _freeze_what_lives_on() -> None:
    """Move what is alive now (modules, most of the SDKs' imported lazily by the first plans, and the
    session's fixtures) out of the cyclic collector's reach: every full collection walked them again,
    ~0.3 s of CPU each, about a quarter of the suite's CPU (measured with gc.callbacks). Garbage is
    collected first, so only live objects are frozen; the collector still runs on everything newer."""
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session) -> None:
    _freeze_what_lives_on()


@pytest.fixture(scope="module", autouse=True)
def _freeze_after_each_module():
    yield
    _freeze_what_lives_on()


@pytest.fixture(scope="session")
def dev(plans) -> Plan:
    return plans["dev"]


def copy_project(source: Path, target: Path) -> None:
    """The checkout as the repository has it: the files git tracks, as they are in the working tree. What
    else lies there (a user's stack files, `make plan` output, venvs, caches) stays out, so a test sees
    the project, not the user's work beside it. Outside a git checkout: everything but venvs, caches
    and plan directories."""
    tracked = tracked_files(source)
    if tracked is None:
        ignore = shutil.ignore_patterns(".venv", "venv", ".git", "plan-*", "__pycache__", ".*cache")
        shutil.copytree(source, target, ignore=ignore)
        return
    for name in tracked:
        if (source / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the project (stack files, serve files, program) that `make plan` reads instead."""
    from offline import plan as plan_cli
    from ray_llm_eks.domain.serving import serve_config

    root = tmp_path / "project"
    copy_project(ROOT, root)
    monkeypatch.setattr(plan_cli, "ROOT", root)
    monkeypatch.setattr(serve_config, "SERVE_CONFIG_DIR", root / "ray_llm_eks" / "serve_configs")
    return root


def plan_fails(project: Path, capsys, stack: str = "dev") -> str:
    """Run `make plan` on the copy; it must fail with exactly one line, writing nothing. (How little CPU a
    mistake costs is measured in a fresh process in tests/harness/offline/test_first_hour.py, as CPU time: wall time
    moves with the machine.)"""
    from offline import plan as plan_cli

    out = project / "out"
    assert plan_cli.main(["--stack", stack, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


def failing_run(overrides: dict, stack: str = "dev", offline_plan: bool = True) -> tuple[Exception, RecordingMonitor]:
    """Run the program with overridden stack values; return the error it raised and the monitor,
    so a test can show both the message and that nothing was declared."""
    from offline.mocks import PlanMocks, RecordingMonitor
    from offline.plan import run_program

    monitor = RecordingMonitor(PlanMocks())
    with pytest.raises(ValueError) as caught:
        run_program(stack, overrides, monitor=monitor, offline_plan=offline_plan)
    return caught.value, monitor


def settings_of(overrides: dict | None = None, stack: str = "dev"):
    """A shipped stack's Settings with overridden values (YAML-level, as in a stack file; None removes a
    key), through the one stack adapter: what the program checks before declaring anything, without
    running it. Unit tests use this; tests/plan runs the program."""
    from ray_llm_eks.adapters import stack as stack_adapter

    return stack_adapter.load_settings(stack_adapter.stack_file(stack, ROOT, overrides=overrides))


def settings_error(overrides: dict, stack: str = "dev") -> ValueError:
    """The one error those values stop the stack with (a ConfigError or a StackFileError)."""
    with pytest.raises(ValueError) as caught:
        settings_of(overrides, stack)
    return caught.value


def region_overrides(region: str) -> dict:
    """Stack values that move dev to another region (its zones a and b)."""
    return {
        "aws:region": region,
        "ray-llm-eks:availabilityZones": [f"{region}a", f"{region}b"],
        "ray-llm-eks:gpuAvailabilityZone": f"{region}a",
    }
