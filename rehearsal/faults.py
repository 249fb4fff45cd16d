"""Faults the rehearsal injects into its own running processes, and what it needs to find them: the engine
process of a role, a Serve replica actor, the processes of one Ray node; and the GCS stores it can run
beside the head (Debian's redis-server, Ray's embedded RocksDB). Everything here acts only on processes
carrying this rehearsal's marker (rehearsal.processes.MARKER).

Why SIGSTOP for the KV path and not a blocked port: the NIXL side channel (ZMQ, ports 20000/22000) carries
only the handshake, once per pair of engines (vLLM 0.26 nixl/base_worker.py caches remote agents after
`_nixl_handshake`); the KV itself moves over the NIXL backend (UCX here, EFA on AWS). A port blocked on
running engines therefore changes nothing until a new engine handshakes. Stopping the prefill engine
(SIGSTOP, then SIGCONT) stalls the side channel and the transfers both, which is what a hung or partitioned
prefill pod does to decode, and needs no iptables (not installed here) nor root on the user's machine."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rehearsal.processes import MARKER, descendants, our_pids

NODE_MARKER = "RAY_LLM_EKS_NODE"  # every process of one Ray node carries its name (head, worker)
ENGINE_TITLE = "VLLM::EngineCore"  # vLLM 0.26 sets it on its engine process (v1/engine/core.py)


def _read(pid: int, name: str) -> bytes:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes()
    except OSError:
        return b""


def title(pid: int) -> str:
    """The process's title as ps shows it (Ray and vLLM rewrite argv: ray::ServeReplica:app:Prefill:...)."""
    return _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def parent(pid: int) -> int | None:
    for line in _read(pid, "status").decode(errors="replace").splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return None


def environ(pid: int) -> dict[str, str]:
    pairs = (item.split(b"=", 1) for item in _read(pid, "environ").split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def replica_pids(run_id: str, deployment_word: str) -> list[int]:
    """Serve replica actors whose title names the deployment (`Prefill`, `Decode`, `Ingress`)."""
    return sorted(p for p in our_pids(run_id) if "ServeReplica:" in title(p) and deployment_word in title(p))


def engine_pids(run_id: str, role: str) -> list[int]:
    """The vLLM engine processes of one PD role: an EngineCore whose parent is that role's replica actor."""
    replicas = set(replica_pids(run_id, role.capitalize()))
    return sorted(p for p in our_pids(run_id) if title(p).startswith(ENGINE_TITLE) and parent(p) in replicas)


def node_pids(run_id: str, node: str) -> list[int]:
    """The node's processes: those carrying its name, and their descendants (a retitled one can show no
    environment at all: rehearsal.processes.our_pids)."""
    marked = [p for p in our_pids(run_id) if environ(p).get(NODE_MARKER) == node]
    return sorted(set(marked) | set(descendants(marked)))


def with_children(pids: Iterable[int]) -> list[int]:
    """The processes and all their descendants (an engine's VLLM::Worker holds its NIXL agent and side channel)."""
    pids = list(pids)
    return [*pids, *descendants(pids)]


def send(pids: Iterable[int], sig: int) -> list[int]:
    sent = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            sent.append(pid)
    return sent


def kill_node(run_id: str, node: str, rounds: int = 3) -> None:
    """Kill every process of a Ray node until none is left: a process its raylet or agent started while the
    first SIGKILLs went out (a worker being spawned) is not in the first list, and outlives its parent."""
    for _ in range(rounds):
        pids = node_pids(run_id, node)
        if not pids:
            return
        kill_and_wait(pids)


# The kernel's TCP states as /proc/net/tcp numbers them (include/net/tcp_states.h).
TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}  # fmt: skip


def port_holders(port: int) -> list[str]:
    """Who holds a local TCP port now ("pid title: state", "-" where no process owns the socket, as in
    TIME_WAIT), from /proc: for the message when a server cannot bind it again."""
    sockets = []  # (inode, state); inode 0 where no process owns it
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    sockets.append((fields[9], TCP_STATES.get(int(fields[3], 16), fields[3])))
    inodes, owners = {inode for inode, _ in sockets}, {}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if (link := os.readlink(fd)).startswith("socket:[") and (inode := link[8:-1]) in inodes:
                owners[inode] = int(fd.parts[2])
    return sorted(
        f"{owners[i]} {title(owners[i])[:60]}: {state}" if i in owners else f"-: {state}" for i, state in sockets
    )


def kill_and_wait(pids: list[int], cap: float = 20.0) -> None:
    send(pids, signal.SIGKILL)
    end = time.monotonic() + cap
    while time.monotonic() < end and any(Path(f"/proc/{p}").exists() and b"zombie" not in _read(p, "status")
                                         for p in pids):  # fmt: skip
        time.sleep(0.2)


# Ray 2.58 `ray start --head` refuses to start where its temp dir names the cluster it last started (this file,
# ray/_common/utils.py get_ray_address_file) while a local raylet still points at that GCS
# (ray/_private/services.py find_gcs_addresses greps raylets' --gcs-address): ray/scripts/scripts.py start.
CLUSTER_ADDRESS_FILE = "ray_current_cluster"


def forget_cluster_address(temp_dir: Path) -> None:
    """What a new head pod starts with: its /tmp has no record of the old head's cluster (here the worker node's
    raylet, a process of this host, still names that GCS, so `ray start --head` would refuse)."""
    (temp_dir / CLUSTER_ADDRESS_FILE).unlink(missing_ok=True)


@dataclass(frozen=True)
class GcsStore:
    """A GCS fault-tolerance backend for the rehearsal's head node: what the head's environment gets."""

    backend: str  # off | redis | rocksdb
    head_env: dict[str, str]
    worker_env: dict[str, str]
    description: str


# KubeRay 1.7 gives workers 600 s to reconnect to a restarted GCS when FT is on (ray-operator
# controllers/ray/common/pod.go configureGCSFaultTolerance, DefaultWorkerRayGcsReconnectTimeoutS); Ray's own
# default is 60 s, after which the raylet exits.
WORKER_RECONNECT = {"RAY_gcs_rpc_server_reconnect_timeout_s": "600"}


# redis-server rewrites its process title over its environment (setproctitle), so the run's marker is gone
# from /proc/<pid>/environ and end_processes cannot find it: the servers started here are stopped at exit.
_STARTED: list[subprocess.Popen] = []


def stop_started_servers() -> None:
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def start_redis(run_id: str, port: int, password: str, data_dir: Path) -> subprocess.Popen:
    """Debian's redis-server on loopback with a password, no persistence of its own (Ray's GCS data lives
    only as long as this server: like ElastiCache without snapshots). Carries the run's marker."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, MARKER: run_id}
    command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--requirepass", password,
               "--save", "", "--appendonly", "no", "--dir", str(data_dir), "--protected-mode", "yes"]  # fmt: skip
    atexit.unregister(stop_started_servers)  # registered once, and only in a process that starts a server
    atexit.register(stop_started_servers)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    _STARTED.append(process)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        done = subprocess.run(
            ["redis-cli", "-p", str(port), "--no-auth-warning", "-a", password, "ping"],
            capture_output=True,
            text=True,
        )
        if done.stdout.strip() == "PONG":
            return process
        time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{port} within 20 s")


def gcs_store(backend: str, run_id: str, port: int, password: str, run_dir: Path) -> GcsStore:
    """The environment that gives the head node GCS fault tolerance, as KubeRay 1.7 sets it on a head pod
    (common/pod.go configureRedisFT / configureEmbeddedFT)."""
    if backend == "off":
        return GcsStore("off", {}, {}, "no GCS fault tolerance (Ray's default in-memory GCS)")
    if backend == "redis":
        start_redis(run_id, port, password, run_dir / "redis")
        env = {"RAY_REDIS_ADDRESS": f"redis://127.0.0.1:{port}", "REDIS_PASSWORD": password,
               "RAY_external_storage_namespace": f"rehearsal-{run_id}"}  # fmt: skip
        return GcsStore("redis", env, dict(WORKER_RECONNECT), f"Debian redis-server on 127.0.0.1:{port}, password")
    if backend == "rocksdb":
        path = run_dir / "gcs-rocksdb"
        subprocess.run(["rm", "-rf", str(path)], check=True)
        env = {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": str(path)}
        return GcsStore("rocksdb", env, dict(WORKER_RECONNECT), f"Ray's embedded RocksDB at {path}")
    raise ValueError(f"GCS backend {backend!r}: off, redis or rocksdb")
