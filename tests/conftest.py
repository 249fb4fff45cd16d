"""Shared fixtures: the real program run offline under Pulumi mocks (offline/plan.py)."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import pytest

from adapters.stackfile import stack_names
from offline.mocks import PlanMocks, RecordingMonitor
from offline.plan import Plan, run_program

STACKS = stack_names()  # every stack file, the user's own included: tests over STACKS hold for any valid one
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
    """The checkout as `make plan` reads it, without venvs (`make policy-sdk` builds policy/venv), caches
    or earlier plans: copying a venv per test would cost more than the test."""
    ignore = shutil.ignore_patterns(".venv", "venv", ".git", "plan-*", "__pycache__", ".*cache")
    shutil.copytree(source, target, ignore=ignore)


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
