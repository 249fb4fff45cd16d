"""Shared fixtures: the real program run offline under Pulumi mocks (offline/plan.py)."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from adapters.stackfile import stack_names
from offline.mocks import PlanMocks, RecordingMonitor
from offline.plan import Plan, run_program

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
    return {stack: run_program(stack) for stack in STACKS}


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


def failing_run(overrides: dict, stack: str = "dev", offline_plan: bool = True) -> tuple[Exception, RecordingMonitor]:
    """Run the program with overridden stack values; return the error it raised and the monitor,
    so a test can show both the message and that nothing was declared."""
    monitor = RecordingMonitor(PlanMocks())
    with pytest.raises(ValueError) as caught:
        run_program(stack, overrides, monitor=monitor, offline_plan=offline_plan)
    return caught.value, monitor


def region_overrides(region: str) -> dict:
    """Stack values that move dev to another region (its zones a and b)."""
    return {
        "aws:region": region,
        "ray-llm-eks:availabilityZones": [f"{region}a", f"{region}b"],
        "ray-llm-eks:gpuAvailabilityZone": f"{region}a",
    }
