"""The GCS store's password is in no Ray process's arguments and in none of the dashboard's answers: Ray 2.58 (the
rehearsal venv's) started as the stack's head starts with `gcsFaultTolerance: redis` (KubeRay's generated command
for the prod head, run by ray_llm_eks/serve_ingress/ray_start.py; Ray's token on, as authOptions sets it), against a
local redis-server that requires the password. Ray's token is held to the same."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.adapters.ports import free_port
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from ray_llm_eks.serve_ingress import ray_start
from rehearsal.processes import end_processes, our_pids
from tests.conftest import ROOT
from tests.harness.rehearsal.test_rehearsal_isa import REHEARSAL_VENV

RAY_PYTHON = REHEARSAL_VENV / "bin" / "python"
STARTED_WITHIN_SECONDS = 150  # ray start on 2 busy cores


def kuberay_command(params: dict[str, str]) -> str:
    """`ray start --head` as KubeRay 1.7 writes it into KUBERAY_GEN_RAY_START_CMD (ray-operator common/pod.go
    generateRayStartCommand, convertParamMap: sorted, ` --key=value `, a "true" value as a bare flag)."""
    flags = "".join(f" --{k} " if v == "true" else f" --{k}={v} " for k, v in sorted(params.items()))
    return f"ray start --head {flags}"


def test_the_generated_command_loses_only_the_password_flag():
    command = kuberay_command({"num-cpus": "0", "block": "true", "redis-password": "$REDIS_PASSWORD", "port": "6379"})
    arguments, password = ray_start.ray_arguments(command, {"REDIS_PASSWORD": "pw-from-secret"})
    assert (arguments, password) == (["start", "--head", "--block", "--num-cpus=0", "--port=6379"], "pw-from-secret")
    assert ray_start.ray_arguments("ray start --head --block", {}) == (["start", "--head", "--block"], None)


def _reasons_to_skip() -> str | None:
    if not RAY_PYTHON.exists():
        return f"no rehearsal venv at {REHEARSAL_VENV} (make rehearsal-venv): Ray 2.58 is needed to start"
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        return "no redis-server here (apt-get install -y redis-server)"
    return None


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """The prod head started through ray_start.py beside a redis that requires the password: (password, token,
    dashboard, run id, redis port)."""
    reason = _reasons_to_skip()
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("head")
    run_id, password, token = f"gcs-{secrets.token_hex(4)}", f"CANARY{secrets.token_hex(16)}", secrets.token_hex(24)
    redis_port, gcs_port, dashboard_port = free_port(), free_port(), free_port()
    server = ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--requirepass", password,
              "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]  # fmt: skip
    redis = subprocess.Popen(server, stdout=subprocess.DEVNULL)
    # The prod head's own rayStartParams, and what KubeRay adds (BuildPod, setMissingRayStartParams, and
    # configureGCSFaultTolerance's redis-password); here on loopback with ports of its own.
    spec = ray_service_spec(stack.load_settings(stack.stack_file("prod", ROOT)))
    params = dict(spec["rayClusterConfig"]["headGroupSpec"]["rayStartParams"])
    params.update({"block": "true", "redis-password": "$REDIS_PASSWORD", "dashboard-host": "127.0.0.1"})
    params.update({"port": str(gcs_port), "dashboard-port": str(dashboard_port), "temp-dir": f"/tmp/rllm-{run_id}"})
    for name in (
        "metrics-export-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "ray-client-server-port",
        "node-manager-port",
        "object-manager-port",
        "runtime-env-agent-port",
    ):
        params[name] = str(free_port())  # fmt: skip
    env = {
        **os.environ,
        "RAY_LLM_EKS_REHEARSAL": run_id,  # rehearsal.processes.MARKER: how its processes are found, and ended
        "KUBERAY_GEN_RAY_START_CMD": kuberay_command(params),
        "RAY_REDIS_ADDRESS": f"redis://127.0.0.1:{redis_port}",  # KubeRay's, from redisAddress
        "REDIS_PASSWORD": password,  # KubeRay's, from redisPassword's secretKeyRef
        "RAY_external_storage_namespace": run_id,
        "RAY_AUTH_MODE": "token",  # authOptions, from the stack's Secret
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",  # one node on loopback (rehearsal/ray_cluster.py says why)
    }
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    started = None
    try:
        # Twice at most, as the rehearsal starts Ray (rehearsal/ray_cluster.py start_ray): on 2 busy cores the
        # raylet can miss Ray's fixed 30 s to register with the GCS, and the start exits.
        for attempt in (1, 2):
            log = tmp_path / f"head-{attempt}.log"
            started = _start_head(env, dashboard, log)
            if started.poll() is None or "timed out during startup" not in log.read_text():
                break
            end_processes(run_id)
        assert started.poll() is None, log.read_text()[-2000:]
        assert _status(f"{dashboard}/api/gcs_healthz") == 200, log.read_text()[-2000:]
        yield password, token, dashboard, run_id, redis_port, gcs_port
    finally:
        end_processes(run_id)
        if started is not None:
            started.kill()
        redis.kill()
        redis.wait(timeout=10)
        shutil.rmtree(f"/tmp/rllm-{run_id}", ignore_errors=True)


def _start_head(env: dict, dashboard: str, log_path: Path) -> subprocess.Popen:
    """ray_start.py as the head's container runs it, until the GCS answers or the start exits."""
    with log_path.open("w") as log:
        started = subprocess.Popen([str(RAY_PYTHON), str(Path(ray_start.__file__))], env=env, stdout=log,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    end = time.monotonic() + STARTED_WITHIN_SECONDS
    while time.monotonic() < end and started.poll() is None and _status(f"{dashboard}/api/gcs_healthz") != 200:
        time.sleep(1)
    return started


def _status(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def _get(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode()


def test_neither_secret_is_in_a_process_argument_or_a_dashboard_answer(head):
    password, token, dashboard, run_id, redis_port, _ = head
    time.sleep(5)  # the raylet's workers and agents are up
    pids = our_pids(run_id)
    commands = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") for p in pids}
    assert any("gcs_server" in c for c in commands.values()) and any("raylet" in c for c in commands.values())
    assert [c for c in commands.values() if password in c or token in c] == []
    # The GCS still reached the store with the password: its tables are there (the module's gflags route).
    keys = subprocess.run(
        ["redis-cli", "-p", str(redis_port), "--no-auth-warning", "-a", password, "--scan"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"RAY{run_id}@" in keys
    answers = {path: _get(f"{dashboard}{path}", token) for path in ("/nodes?view=summary", "/api/v0/nodes")}
    assert "cmdline" in answers["/nodes?view=summary"]  # where Ray 2.58 shows every process's arguments
    assert [path for path, text in answers.items() if password in text or token in text] == []
    # And without Ray's token the dashboard answers nothing but its health checks.
    assert _status(f"{dashboard}/nodes?view=summary") == 401
    assert _status(f"{dashboard}/api/serve/applications/") == 401
    assert _status(f"{dashboard}/api/jobs/") == 401
    print(json.dumps({"processes": len(commands), "redis keys": keys.count("\n")}), file=sys.stderr)


DRIVER = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); print(ray.cluster_resources())"


def test_a_driver_without_rays_token_cannot_join_and_one_with_it_can(head):
    """What a pod outside the Ray cluster, whatever the network lets through, cannot do: run code in it."""
    _, token, _, run_id, _, gcs_port = head
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    base.update({"RAY_LLM_EKS_REHEARSAL": run_id, "RAY_USAGE_STATS_ENABLED": "0"})
    address = f"127.0.0.1:{gcs_port}"
    with_token = {**base, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    for env, joins in ((base, False), (with_token, True)):
        done = subprocess.run([str(RAY_PYTHON), "-c", DRIVER, address], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert (done.returncode == 0) == joins, (joins, done.stderr[-1500:])
