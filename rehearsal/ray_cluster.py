"""Phase 2 of a rehearsal: Ray on this machine, on loopback, with ports and a temp dir of its own. One node,
or several on one host (the GPU layout: prefill's node first, decode's node once prefill is healthy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ray_llm_eks.adapters.ports import free_port
from rehearsal import ray_token
from rehearsal.context import Clock, RehearsalFailed
from rehearsal.processes import end_processes
from rehearsal.verify import http_json

# The dashboard gives each of its module processes 30 s to start (ray/dashboard/consts.py); on 2 busy cores
# (load 15) MetricsHead took longer and the dashboard, so the deploy API, never came up.
DASHBOARD_MODULE_WAIT = "180"
# Several Ray nodes on this host: each on 127.0.0.2 (Node.ip) with Ray clusters enabled (Linux's default; the
# rehearsal's "0" refuses a second node).
MULTI_NODE_IP = "127.0.0.2"
MULTI_NODE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}


# How often each Ray process exports its metrics here: short, so the smoke's requests show within seconds.
METRICS_REPORT_INTERVAL_MS = 2000


@dataclass
class Node:
    """One Ray node of the rehearsal. `after_role`: started once that role's deployment is HEALTHY (vLLM
    profiles the free memory of the whole device, so two engines on one GPU start one after the other)."""

    name: str
    cpus: int
    gpus: int | None = None  # None: Ray's own count (0 on a machine without GPUs)
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # this node's processes only (CUDA_VISIBLE_DEVICES, ...)
    after_role: str | None = None
    after_replicas: int = 0  # started once after_role has this many replicas RUNNING instead (0: HEALTHY)
    args: list[str] = field(default_factory=list)  # more `ray start` flags (a GCS store's password)
    # Its address, on loopback. Several nodes use 127.0.0.2: Ray turns "127.0.0.1" and "localhost" in a joining
    # node's --address into the host's network address (ray/_private/services.py resolve_ip_for_localhost,
    # is_localhost), where the GCS, bound to the node address, does not listen; any other 127/8 address stays.
    ip: str = "127.0.0.1"
    object_store_bytes: int | None = None  # None: Ray's default
    metrics_port: int = 0  # drawn as the node starts (0: not yet); kept when the same node is started again
    temp_dir: Path = Path()  # its own (Ray names its daemons' log files alike on every node)
    started: bool = False

    @property
    def log_dir(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"


@dataclass
class Cluster:
    nodes: list[Node]
    gcs_port: int
    dashboard_port: int
    env: dict[str, str]  # every node's processes

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def temp_dirs(self) -> list[Path]:
        return [n.temp_dir for n in self.nodes]

    @property
    def log_dirs(self) -> list[Path]:
        return [n.log_dir for n in self.nodes]

    @property
    def metrics_urls(self) -> list[str]:
        """The Prometheus endpoint of each node started so far, on the port its `ray start` was given."""
        return [f"http://{n.ip}:{n.metrics_port}/metrics" for n in self.nodes if n.started]

    def command(self, node: Node) -> list[str]:
        return node_command(self, node, node is self.nodes[0])

    def node_env(self, node: Node) -> dict[str, str]:
        env = dict(self.env)
        if node is not self.nodes[0]:
            # A second node refused to join with it set ("Multi-node Ray clusters are not supported on Windows
            # and OSX", ray/scripts/scripts.py start); --node-ip-address is explicit.
            env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        return {**env, **node.env}

    def later(self) -> dict[tuple[str, int], Node]:
        """(role, replicas RUNNING; 0: HEALTHY) -> the node that waits for it."""
        return {(n.after_role, n.after_replicas): n for n in self.nodes if n.after_role and not n.started}


def cluster(nodes: list[Node], run_id: str, env: dict[str, str]) -> Cluster:
    for i, node in enumerate(nodes):
        # Ray's session dir holds unix sockets: keep the path short.
        node.temp_dir = Path(f"/tmp/rllm-{run_id}" + (f"-{i}" if i else ""))
    return Cluster(nodes, free_port(), free_port(), env)


def _own_ports() -> list[str]:
    """Ports of our own, so that another Ray on this machine (defaults) never clashes."""
    return [
        f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}", f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
    ]  # fmt: skip


def node_command(c: Cluster, node: Node, head: bool) -> list[str]:
    # Ray's CLI through this Python (its `ray` script need not be on PATH, e.g. a GPU machine's --target install).
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", f"--node-ip-address={node.ip}",
               f"--num-cpus={node.cpus}", "--disable-usage-stats", f"--metrics-export-port={node.metrics_port}",
               f"--temp-dir={node.temp_dir}", *_own_ports()]  # fmt: skip
    if node.gpus is not None:
        command.append(f"--num-gpus={node.gpus}")
    if node.object_store_bytes is not None:
        command.append(f"--object-store-memory={node.object_store_bytes}")
    if node.resources:
        command.append(f"--resources={json.dumps(node.resources, sort_keys=True)}")
    command += node.args
    if head:
        command += [
            "--head", f"--port={c.gcs_port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={c.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
        ]  # fmt: skip
    else:
        command.append(f"--address={c.nodes[0].ip}:{c.gcs_port}")
    return command


def start_node(c: Cluster, node: Node, run_id: str, clock: Clock) -> None:
    head = node is c.nodes[0]

    # Another head can be started over a failed one; a node that joins cannot (its half-started raylet stays).
    # The command again on each attempt: its own ports are drawn anew (another process may have taken one).
    def command() -> list[str]:
        # Its metrics port too: one drawn when the cluster was planned can be taken by the time a later node
        # starts (minutes on one GPU), and its dashboard agent then dies on bind ("Address already in use").
        node.metrics_port = free_port()
        return c.command(node)

    start_ray(command, c.node_env(node), run_id, clock, attempts=2 if head else 1, end_on_failure=head)
    node.started = True
    latest, sessions = node.temp_dir / "session_latest", sorted(node.temp_dir.glob("session_2*"))
    if not latest.exists() and sessions:  # where Ray leaves no session_latest link: the logs are found the same way
        latest.symlink_to(sessions[-1])


def start_ray(
    command: Callable[[], list[str]],
    env: dict,
    run_id: str,
    clock: Clock,
    attempts: int = 2,
    end_on_failure: bool = True,
) -> None:
    """`ray start`, once more if it fails: on 2 busy cores the raylet can miss Ray's fixed 30 s to register
    with the GCS ("The current node timed out during startup", ray/_private/node.py)."""
    for attempt in range(1, attempts + 1):
        try:
            done = subprocess.run(command(), env=env, capture_output=True, text=True, timeout=180)
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        except subprocess.TimeoutExpired as exc:
            said = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
            done, reason = None, "no answer within 180 s" + (f"; it said last: {said[-1]}" if said else "")
        if done is not None and done.returncode == 0:
            return
        if end_on_failure:
            end_processes(run_id)
        clock.mark(f"ray start failed (attempt {attempt} of {attempts}): {reason[:300]}")
    raise RehearsalFailed(f"ray start failed {attempts} times; last: {reason[:300]}")


def wait_dashboard(dashboard: str, cap: float = 120.0) -> None:
    end = time.monotonic() + cap
    while True:
        try:
            http_json("GET", f"{dashboard}/api/serve/applications/", timeout=5)
            return
        except (urllib.error.URLError, OSError, ValueError):
            if time.monotonic() > end:
                raise RehearsalFailed(f"Ray dashboard not answering at {dashboard} within {cap:g} s") from None
            time.sleep(1.0)


def base_environment(run_id: str) -> dict[str, str]:
    """What every process of the rehearsal gets, on any target."""
    from rehearsal.processes import MARKER

    env = dict(os.environ)
    env.update(
        {
            MARKER: run_id,
            "HF_HUB_OFFLINE": "1",  # no hub: the weights are local
            "TRANSFORMERS_OFFLINE": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_metrics_report_interval_ms": str(METRICS_REPORT_INTERVAL_MS),
            "PYTHONUNBUFFERED": "1",
            # Ray on loopback: it resolves 127.0.0.1 to the host's network address unless told it runs
            # a single-node "Windows/OSX" cluster (ray/_private/services.py get_node_ip_address).
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": DASHBOARD_MODULE_WAIT,
            **ray_token.ENV,  # Ray's token authentication, as KubeRay's authOptions sets it on the pods
        }
    )
    return env
