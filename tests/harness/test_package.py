"""The components as an installable package (pyproject.toml [project]): a wheel built from the files git
tracks, installed apart from the checkout, renders a stack's RayService and builds the components' Args
from its own files alone (domain/data, serve_configs, serve_ingress found beside its modules)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from adapters import stack
from adapters.environment import CACHE_ENV, cache_dir
from adapters.stackfile import ROOT, load_stack
from domain import api_keys
from tests.conftest import copy_project

# Run in the installed copy: the dev stack's values in, its Args (and where their modules came from) out.
PROBE = """
import json, sys
from adapters import stack
from adapters.stackfile import StackConfig
from domain import api_keys
import components.llm_service, stack_args

given = json.loads(sys.stdin.read())
config = StackConfig(given["project"], given["stack"], given["values"], frozenset())
settings = stack.load_settings(config)
args = stack_args.llm_service_args(settings, stack.load_deploy_mode(config), settings.hardening, None, None, None, [])
print(json.dumps({
    "module": components.llm_service.__file__,
    "path": sys.path,
    "spec": args.ray_service_spec,
    "model_id": args.model_id,
    "ingress": sorted(api_keys.ingress_sources()),
}))
"""


def _args(config) -> dict:
    import stack_args

    settings = stack.load_settings(config)
    built = stack_args.llm_service_args(
        settings, stack.load_deploy_mode(config), settings.hardening, None, None, None, []
    )
    return asdict(built)


def test_a_wheel_installed_apart_from_the_checkout_builds_the_same_args(tmp_path: Path):
    """About 10 s, most of it pip's isolated build environment (setuptools and wheel from the index)."""
    source, wheels, target = tmp_path / "source", tmp_path / "wheels", tmp_path / "site"
    copy_project(ROOT, source)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("ray_llm_eks-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, cwd=tmp_path)

    config = load_stack("dev")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONPATH": str(target), CACHE_ENV: str(cache_dir())}  # botocore's facts: the cache already made
    given = json.dumps({"project": config.project, "stack": config.stack, "values": config.values})
    ran = subprocess.run(
        [sys.executable, "-c", PROBE], input=given, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert ran.returncode == 0, ran.stderr
    installed = json.loads(ran.stdout)

    assert Path(installed["module"]).is_relative_to(target)
    assert not any((tmp_path / p).resolve() == ROOT for p in installed["path"])  # "" is its cwd
    here = _args(config)
    assert installed["spec"] == json.loads(json.dumps(here["ray_service_spec"]))
    assert installed["model_id"] == here["model_id"]
    assert installed["ingress"] == sorted(api_keys.ingress_sources())
