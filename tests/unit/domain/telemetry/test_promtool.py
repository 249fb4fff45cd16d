"""promtool, the one Prometheus ships, on our rules: `check rules` on every shipped stack's PrometheusRule and
the unit tests in ray_llm_eks/observability/rules-tests/ (alerts that must fire, and when they must not). promtool comes
from the Go build (go_binaries/build.py, Prometheus 3.14.0) or the PATH; without it these tests skip, saying so."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from go_binaries import build
from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render import alert_rules
from ray_llm_eks.domain.telemetry import alerts
from tests.conftest import ROOT

TESTS_DIR = ROOT / "ray_llm_eks" / "observability" / "rules-tests"
# What the unit tests in TESTS_DIR assume (their header says so).
TEST_INPUTS = alerts.RuleInputs(pd=True, namespace="ray", service_name="llm-dev", kv_floor_bytes_per_s=1e9)


def promtool() -> str | None:
    built = build.component_dir(build.PROMETHEUS) / "promtool"
    return str(built) if built.is_file() else shutil.which("promtool")


# `make test-rules` (CI, after the Go build) insists: there a missing promtool fails instead of skipping.
REQUIRED = bool(os.environ.get("RAY_LLM_EKS_REQUIRE_PROMTOOL"))
needs_promtool = pytest.mark.skipif(
    promtool() is None and not REQUIRED,
    reason="no promtool: `python3 -m go_binaries.build prometheus` builds it (or put one on PATH)",
)


def test_promtool_is_there_when_required():
    assert promtool() is not None or not REQUIRED, "no promtool: run `python3 -m go_binaries.build prometheus` first"


def _write_rules(directory: Path, spec: dict) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    return path


def _promtool_tests(tmp_path: Path, inputs: alerts.RuleInputs, tests_dir: Path) -> None:
    _write_rules(tmp_path, alerts.render(inputs))
    tests = sorted(tests_dir.glob("*.yaml"))
    assert tests, f"no promtool unit tests in {tests_dir}"
    for path in tests:
        shutil.copy(path, tmp_path / path.name)
    done = subprocess.run(
        [promtool(), "test", "rules", *(p.name for p in tests)], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_the_alerts_fire_when_and_only_when_the_unit_tests_say(tmp_path):
    _promtool_tests(tmp_path, TEST_INPUTS, TESTS_DIR)


@needs_promtool
def test_with_selective_pd_decode_computing_local_path_prompts_is_not_an_alert(tmp_path):
    """The tests in selective-pd/ assume TEST_INPUTS with selectivePd 1024 (their header says so)."""
    _promtool_tests(tmp_path, dataclasses.replace(TEST_INPUTS, local_prefill_below=1024), TESTS_DIR / "selective-pd")


@needs_promtool
@pytest.mark.parametrize("name", ["dev", "baseline", "prod"])
def test_every_shipped_stack_renders_rules_promtool_accepts(tmp_path, name):
    spec = alert_rules.prometheus_rule_spec(stack.load_settings(stack.stack_file(name, ROOT)))
    rules = _write_rules(tmp_path, spec)
    done = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_section():
    tested = {
        test["alertname"]
        for path in TESTS_DIR.glob("*.yaml")
        for case in yaml.safe_load(path.read_text())["tests"]
        for test in case.get("alert_rule_test", [])
    }
    names = set(alerts.alert_names(alerts.render(TEST_INPUTS)))
    assert names - tested == set()
    # GitHub's anchor of a heading is its text in lower case: the rules' runbook links point there.
    runbook = (ROOT / alerts.RUNBOOK).read_text()
    assert [n for n in sorted(names) if f"\n### {n}\n" not in runbook] == []
