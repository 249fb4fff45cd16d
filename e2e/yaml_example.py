"""examples/pd-service-yaml run by the real Pulumi CLI and Pulumi YAML's language host (both from the e2e
build) against the harness's API server: `pulumi up`, the RayService checked through the API server, then
`pulumi destroy` and the objects checked gone.

What differs from the example as shipped, and why:
- its `kuberay` resource is left out: the harness runs the KubeRay operator itself (no Helm chart can be
  fetched here), as the main e2e stack sets installKubeRay false;
- waitForReady is false (fake pods never run Ray) and the namespace is the e2e's own;
- the package path names a folder beside the project holding PulumiPlugin.yaml and an executable
  `pulumi-resource-ray-llm-eks` that starts the package's component provider host with the e2e's Python.
  A `runtime: python` plugin is otherwise started through the `pulumi-language-python` plugin
  (sdk/go/common/resource/plugin/plugin.go newPlugin: a folder without that executable goes through
  Host.LanguageRuntime), which the Go module proxy does not serve; the engine runs an executable of the
  plugin's file name in the package folder directly (workspace/plugins.go getPluginPath).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

from e2e.observe import wait_for_gone
from ray_llm_eks.domain.serving.serve_app import parse_document
from ray_llm_eks.domain.serving.serve_config import shipped_document

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "pd-service-yaml"
STACK = "e2e-yaml"
NS = "llm-yaml"  # not the main stack's namespace: nothing of the seed stack can satisfy a check here
PROVIDER = "pulumi-resource-ray-llm-eks"  # the file the engine looks for: pulumi-resource-<package name>


def package_dir(where: Path, python: str) -> Path:
    where.mkdir(parents=True)
    (where / "PulumiPlugin.yaml").write_text((REPO / "PulumiPlugin.yaml").read_text())
    shim = where / PROVIDER
    shim.write_text(f'#!/bin/sh\ncd {REPO} && exec {python} -m ray_llm_eks "$@"\n')
    shim.chmod(0o755)
    return where


def project(where: Path, package: Path) -> Path:
    doc = yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())
    doc["packages"] = {"ray-llm-eks": str(package)}
    del doc["resources"]["kuberay"]
    llm = doc["resources"]["llm"]
    llm.pop("options")  # its only option is dependsOn kuberay
    llm["properties"].update(waitForReady=False, namespace=NS)
    # The Ray cluster's token from a secret of the stack, as a user may give it: without one the component makes a
    # random one with pulumi-random, whose plugin cannot be built here (the Go module proxy refuses its module).
    doc["config"]["rayAuthToken"] = {"type": "string", "secret": True}
    llm["properties"]["rayAuthToken"] = "${rayAuthToken}"
    where.mkdir(parents=True)
    (where / "Pulumi.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return where


def cli(args: list[str], cwd: Path, env: dict[str, str], log, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`stdin`: what the command reads (a secret's value: never in its arguments, which the log shows)."""
    log(f"$ pulumi {' '.join(args)}")
    return subprocess.run(["pulumi", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          input=stdin)  # fmt: skip


def run(work: Path, env: dict[str, str], api, model: str, log, checks) -> None:
    """`model`: the model the example's serving application serves (its serve config's)."""
    env = dict(env, PATH=os.pathsep.join([str(d) for d in _yaml_bin()] + [env["PATH"]]))
    package = package_dir(work / "yaml-package", sys.executable)
    proj = project(work / "yaml-project", package)
    done = cli(["stack", "init", STACK, "--secrets-provider", "passphrase", "--non-interactive"], proj, env, log)
    if not checks.expect(done.returncode == 0, "YAML example: pulumi stack init", done.stderr[-300:]):
        return
    stack_file = proj / f"Pulumi.{STACK}.yaml"
    doc = yaml.safe_load(stack_file.read_text()) or {}
    doc["config"] = {"pd-service-yaml:region": "us-east-1"}
    stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    token = secrets.token_hex(24)
    done = cli(["config", "set", "--secret", "rayAuthToken"], proj, env, log, stdin=token)
    checks.expect(done.returncode == 0, "YAML example: pulumi config set --secret rayAuthToken", done.stderr[-300:])
    done = cli(["up", "--yes", "--skip-preview", "--non-interactive", "--color", "never"], proj, env, log)
    checks.expect(done.returncode == 0, "YAML example: pulumi up (real CLI, pulumi-language-yaml) succeeds",
                  (done.stdout + done.stderr)[-3000:])  # fmt: skip
    services = api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayservices")["items"]
    checks.expect(len(services) == 1, f"YAML example: the API server has one RayService in {NS}",
                  str([s["metadata"]["name"] for s in services]))  # fmt: skip
    if services:
        live = services[0]["spec"]
        models = served_models(live["serveConfigV2"])
        checks.expect(models == {model}, f"YAML example: the RayService serves {model}",
                      str(models))  # fmt: skip
        # The component rendered them from the example's gpuPools, one worker group per pool.
        pools = [pool["name"] for pool in project_doc(proj)["resources"]["llm"]["properties"]["gpuPools"]]
        live_groups = [g["groupName"] for g in live["rayClusterConfig"]["workerGroupSpecs"]]
        checks.expect(live_groups == pools, "YAML example: the RayService has one worker group per gpuPools entry",
                      f"{live_groups} != {pools}")  # fmt: skip
    exported = cli(["stack", "export"], proj, env, log).stdout or "{}"
    shown = exported + done.stdout + done.stderr  # done: the up's
    checks.expect(token not in shown, "YAML example: Ray's token is in neither the state nor the CLI's output")
    state = json.loads(exported)
    types = {r["type"] for r in state.get("deployment", {}).get("resources", [])}
    checks.expect("ray-llm-eks:index:LlmService" in types, "YAML example: the state holds the LlmService component",
                  str(sorted(types)))  # fmt: skip
    done = cli(["destroy", "--yes", "--skip-preview", "--non-interactive", "--color", "never"], proj, env, log)
    checks.expect(done.returncode == 0, "YAML example: pulumi destroy succeeds", (done.stdout + done.stderr)[-600:])
    checks.expect(bool(services) and wait_for_gone(api, f"/api/v1/namespaces/{NS}", 60),
                  f"YAML example: namespace {NS} and its RayService are gone after destroy")  # fmt: skip


def example_model() -> str:
    """The model the example serves: its serving application's, as the shipped serve file names it."""
    llm = yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())["resources"]["llm"]["properties"]
    return shipped_document(llm["serveConfig"]).model_id


def project_doc(proj: Path) -> dict:
    return yaml.safe_load((proj / "Pulumi.yaml").read_text())


def served_models(serve_config_v2: str) -> set[str]:
    roles = parse_document(yaml.safe_load(serve_config_v2), "serveConfigV2").roles
    return {config.model.model_id or "" for config in roles.values()}


def _yaml_bin() -> list[Path]:
    from go_binaries.build import bin_dirs

    return [bin_dirs()["pulumi-yaml"]]
