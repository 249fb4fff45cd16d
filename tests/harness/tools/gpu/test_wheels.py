"""`make gpu-wheels`' own Python step, run as the script runs it (tools/gpu/wheels.sh with KIT_ONLY=1: no download),
so that a broken import or a moved module fails here and not on a GPU machine after a 1.1 GB download."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.conftest import ROOT


def test_the_kit_step_renders_each_stacks_spec_and_ships_botocores_facts(tmp_path):
    env = {**os.environ, "KIT_ONLY": "1", "WHL_DIR": str(tmp_path), "STACK": "dev,baseline", "PYTHON": sys.executable}
    done = subprocess.run([str(ROOT / "tools/gpu/wheels.sh")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    kit = tmp_path / "kit"
    dev = json.loads((kit / "dev.rayservice.json").read_text())
    app = yaml.safe_load(dev["serveConfigV2"])["applications"][0]
    assert app["import_path"] == "prefill_guard:build_pd_app"  # Ray's PD builder behind the prefill guard
    baseline = json.loads((kit / "baseline.rayservice.json").read_text())
    collocated = yaml.safe_load(baseline["serveConfigV2"])["applications"][0]
    assert collocated["import_path"] == "ray.serve.llm:build_openai_app"
    (facts,) = kit.glob("botocore-facts-*.json")
    assert json.loads(facts.read_text()), "botocore's facts are empty"
    assert not (tmp_path / ".download").exists(), "KIT_ONLY downloaded wheels"
    # The GPU machine checks the kit against the code it runs (rehearsal/kit_source.py): this checkout's.
    check = subprocess.run([sys.executable, "-m", "rehearsal.kit_source", "check", str(kit)], cwd=ROOT,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_a_stack_that_does_not_plan_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rehearsal.kit", "nosuchstack", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "nosuchstack" in done.stderr, done.stderr
