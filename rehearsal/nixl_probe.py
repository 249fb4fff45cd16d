"""NIXL READs between two processes on this machine, as vLLM 0.26's NixlConnector makes them (decode reads what
prefill holds): one transfer at a time, then many at once. Says how fast one request's KV moves and whether
transfers of different requests overlap or queue behind each other; no engine, no model, seconds to run.

    python -m rehearsal.nixl_probe [--device cuda|cpu] [--mib 66] [--descriptors 104] [--transfers 16] [--ray]

Two plain processes by default, as plain `vllm serve` engines hold their NIXL agents; `--ray`: two Ray actors on a
Ray started here, as Ray Serve LLM holds them (each with a share of the GPU, the worker's environment and our app's
worker setup hook), which also reports each actor's UCX libraries and environment.

The defaults are one Qwen3.5-9B request of ~300 prompt tokens: one 528-token attention block (16.5 MiB) and the
Gated DeltaNet state (49 MiB) in 104 descriptors (nixl/base_worker.py's layout for that model). The environment
decides UCX's transports (e.g. UCX_CUDA_IPC_ENABLE_GET_ZCOPY); the result names what it ran with. Runs in the
rehearsal's Python (torch and nixl); prints one JSON object."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

MIB = 2**20


def _buffer(device: str, size: int):
    import torch

    return torch.ones(size, dtype=torch.uint8, device=device)


def _pieces(tensor, descriptors: int) -> list:
    step = -(-tensor.numel() // descriptors)
    return [tensor[i : i + step] for i in range(0, tensor.numel(), step)]


# vLLM 0.26's NIXL agent on UCX alone: nixl/base_worker.py `NixlBaseConnectorWorker.__init__`
# (kv_connector_extra_config num_threads, default 4; telemetry on).
VLLM_UCX_THREADS = 4


def _agent_and_buffer(name: str, device: str, size: int, agent_first: bool, threads: int):
    """A NIXL agent with the UCX backend configured as vLLM's and a buffer of `size` bytes on `device`, made in
    vLLM's order (the KV cache is allocated, so CUDA is up, before its connector starts NIXL) unless `agent_first`
    starts UCX first."""
    from nixl._api import nixl_agent, nixl_agent_config

    def agent():
        return nixl_agent(name, nixl_agent_config(backends=["UCX"], num_threads=threads, capture_telemetry=True))

    if agent_first:
        made = agent()
        return made, _buffer(device, size)
    held = _buffer(device, size)
    return agent(), held


def _target(folder: str, device: str, size: int, descriptors: int, agent_first: bool, threads: int) -> None:
    """The side holding the KV (prefill): registers its buffer, publishes metadata and descriptors, waits."""
    agent, held = _agent_and_buffer("target", device, size, agent_first, threads)
    agent.register_memory(held)
    descs = agent.get_xfer_descs(_pieces(held, descriptors))
    Path(folder, "target.meta").write_bytes(agent.get_agent_metadata())
    Path(folder, "target.descs").write_bytes(agent.get_serialized_descs(descs))
    Path(folder, "target.ready").write_text("ok")
    end = time.monotonic() + 600
    while not Path(folder, "done").exists() and time.monotonic() < end:
        time.sleep(0.05)


def _wait_all(agent, handles: list, timeout: float) -> None:
    end = time.monotonic() + timeout
    pending = list(handles)
    while pending:
        states = [agent.check_xfer_state(h) for h in pending]
        if "ERR" in states:
            raise RuntimeError("a NIXL transfer failed")
        pending = [h for h, s in zip(pending, states, strict=True) if s != "DONE"]
        if time.monotonic() > end:
            raise RuntimeError(f"{len(pending)} NIXL transfers still running after {timeout:.0f} s")


def _measure(agent, local, size: int, descriptors: int, transfers: int, remote_meta: bytes, remote_descs: bytes,
             op: str, timeout: float) -> dict:  # fmt: skip
    """The timed half, on the initiator (decode): READs (or WRITEs) of `transfers` regions, one at a time, then all
    posted together. `local` holds `transfers` regions of `size` bytes."""
    remote = agent.add_remote_agent(remote_meta)
    descs = agent.deserialize_descs(remote_descs)
    local.zero_()
    agent.register_memory(local)
    regions = [local[i * size : (i + 1) * size] for i in range(transfers)]
    if op == "WRITE":  # the push connector's way: prefill writes into decode's blocks
        local.fill_(1)
    handles = [agent.initialize_xfer(op, agent.get_xfer_descs(_pieces(r, descriptors)), descs, remote)
               for r in regions]  # fmt: skip
    # The first READ of a new peer connects (UCX's wire-up): once, before timing.
    agent.transfer(handles[0])
    _wait_all(agent, handles[:1], timeout)
    one = []
    for handle in handles:
        start = time.monotonic()
        agent.transfer(handle)
        _wait_all(agent, [handle], timeout)
        one.append(time.monotonic() - start)
    start = time.monotonic()
    for handle in handles:
        agent.transfer(handle)
    _wait_all(agent, handles, timeout)
    together = time.monotonic() - start
    serial = sum(one)
    return {
        "transfers": transfers,
        "one_at_a_time_ms": round(1000 * serial / len(one), 2),
        "one_at_a_time_gb_per_s": round(size * len(one) / serial / 1e9, 3),
        "all_at_once_ms": round(1000 * together, 2),
        "all_at_once_gb_per_s": round(size * transfers / together / 1e9, 3),
        # 1: the transfers overlapped as well as they could; transfers: they ran one after another.
        "queueing_factor": round(together / (serial / len(one)), 2),
        "data_arrived": bool(int(local.min().item()) == 1),  # a WRITE's arrival is the target's to see
        "ucx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("UCX_")},
    }


def probe(device: str, mib: float, descriptors: int, transfers: int, timeout: float = 300.0, op: str = "READ",
          agent_first: bool = False, threads: int = VLLM_UCX_THREADS) -> dict:  # fmt: skip
    """Both sides as plain processes (this one and a spawned child), as plain `vllm serve` engines are."""
    size = int(mib * MIB)
    folder = tempfile.mkdtemp(prefix="nixl-probe-")
    held_by = (folder, device, size, descriptors, agent_first, threads)
    child = mp.get_context("spawn").Process(target=_target, args=held_by, daemon=True)
    child.start()
    try:
        end = time.monotonic() + 120
        while not Path(folder, "target.ready").exists():
            if not child.is_alive() or time.monotonic() > end:
                raise RuntimeError("the target process did not publish its metadata")
            time.sleep(0.05)
        agent, local = _agent_and_buffer("initiator", device, size * transfers, agent_first, threads)
        meta, descs = Path(folder, "target.meta").read_bytes(), Path(folder, "target.descs").read_bytes()
        figures = _measure(agent, local, size, descriptors, transfers, meta, descs, op, timeout)
    finally:
        Path(folder, "done").write_text("ok")
        child.join(30)
    return _described(device, op, agent_first, threads, mib, descriptors, "processes") | figures


def _described(device: str, op: str, agent_first: bool, threads: int, mib: float, descriptors: int,
               between: str) -> dict:  # fmt: skip
    return {"device": device, "op": op, "agent_first": agent_first, "ucx_threads": threads, "between": between,
            "mib_per_transfer": mib, "descriptors_per_transfer": descriptors}  # fmt: skip


# Where Ray Serve LLM 2.58 runs vLLM's GPU worker, and so its NIXL agent: a Ray actor (vLLM 0.26 RayWorkerProc,
# v1/executor/ray_executor_v2.py) that gets the replica's runtime_env plus this variable (platforms/cuda.py).
RAY_WORKER_ENV = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}
SERVE_INGRESS = Path(__file__).resolve().parents[1] / "ray_llm_eks" / "serve_ingress"


class _Side:
    """One side of the probe as a Ray actor: an agent and its buffer, made in vLLM's order unless agent_first."""

    def __init__(self, name: str, device: str, size: int, agent_first: bool, threads: int):
        self.agent, self.held = _agent_and_buffer(name, device, size, agent_first, threads)

    def publish(self, descriptors: int) -> tuple[bytes, bytes]:
        self.agent.register_memory(self.held)
        descs = self.agent.get_xfer_descs(_pieces(self.held, descriptors))
        return self.agent.get_agent_metadata(), self.agent.get_serialized_descs(descs)

    def measure(self, *args) -> dict:
        return _measure(self.agent, self.held, *args)

    def process(self) -> dict:
        """What differs between a Ray actor and a plain process, where UCX could see it."""
        maps = Path("/proc/self/maps").read_text().splitlines()
        paths = (parts[5] for parts in (line.split(None, 5) for line in maps) if len(parts) > 5)
        names = {Path(path.removesuffix(" (deleted)")).name for path in paths}
        libraries = sorted(name for name in names if name.startswith(("libuc", "libnixl", "libplugin_UCX")))
        watched = ("UCX_", "CUDA_", "RAY_EXPERIMENTAL_NOSET", "PYTORCH_", "NIXL_", "LD_PRELOAD", "OMP_NUM_THREADS",
                   "PYTHONPATH")  # fmt: skip
        return {"pid": os.getpid(), "ucx_libraries": libraries,
                "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(watched)}}  # fmt: skip


def probe_in_ray(device: str, mib: float, descriptors: int, transfers: int, timeout: float = 300.0,
                 op: str = "READ", agent_first: bool = False, threads: int = VLLM_UCX_THREADS,
                 setup_hook: bool = True) -> dict:  # fmt: skip
    """Both sides as Ray actors on a Ray started here, placed as Ray Serve LLM places vLLM's GPU worker (a share of
    the one GPU each, the worker's environment, our app's worker setup hook unless `setup_hook` is False)."""
    import ray

    from ray_llm_eks.domain.serving.api_keys import WORKER_SETUP_HOOK

    size = int(mib * MIB)
    gpus = 0.5 if device == "cuda" else 0
    # The runtime_env's PYTHONPATH replaces the worker's: Ray expands ${PYTHONPATH} to the one Ray itself came from.
    paths = [str(SERVE_INGRESS.parent.parent), str(SERVE_INGRESS), "${PYTHONPATH}"]
    env = RAY_WORKER_ENV | {"PYTHONPATH": os.pathsep.join(paths)}
    runtime_env = {"env_vars": env} | ({"worker_process_setup_hook": WORKER_SETUP_HOOK} if setup_hook else {})
    ray.init(num_cpus=2, num_gpus=1 if device == "cuda" else 0, include_dashboard=False, log_to_driver=True,
             runtime_env=runtime_env)  # fmt: skip
    try:
        side = ray.remote(num_gpus=gpus, num_cpus=0)(_Side)
        target = side.remote("target", device, size, agent_first, threads)
        initiator = side.remote("initiator", device, size * transfers, agent_first, threads)
        meta, descs = ray.get(target.publish.remote(descriptors), timeout=120)
        figures = ray.get(initiator.measure.remote(size, descriptors, transfers, meta, descs, op, timeout),
                          timeout=timeout + 60)  # fmt: skip
        processes = ray.get([initiator.process.remote(), target.process.remote()], timeout=60)
    finally:
        ray.shutdown()
    described = _described(device, op, agent_first, threads, mib, descriptors, "ray-actors")
    return described | figures | {"setup_hook": setup_hook, "initiator": processes[0], "target": processes[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nixl_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--mib", type=float, default=66.0)
    parser.add_argument("--descriptors", type=int, default=104)
    parser.add_argument("--transfers", type=int, default=16)
    parser.add_argument("--op", default="READ", choices=("READ", "WRITE"), help="READ: the pull connector's (default)")
    parser.add_argument("--agent-first", action="store_true",
                        help="start NIXL's UCX before the buffers exist (before CUDA is up), unlike vLLM")  # fmt: skip
    parser.add_argument("--threads", type=int, default=VLLM_UCX_THREADS,
                        help=f"NIXL's num_threads (default {VLLM_UCX_THREADS}, vLLM's; 0: NIXL's default)")  # fmt: skip
    parser.add_argument("--ray", action="store_true",
                        help="both sides as Ray actors placed as Ray Serve LLM places vLLM's GPU worker")  # fmt: skip
    parser.add_argument("--no-setup-hook", action="store_true", help="with --ray: without our app's worker setup hook")
    args = parser.parse_args(argv)
    common = {"op": args.op, "agent_first": args.agent_first, "threads": args.threads}
    try:
        if args.ray:
            result = probe_in_ray(args.device, args.mib, args.descriptors, args.transfers, **common,
                                  setup_hook=not args.no_setup_hook)  # fmt: skip
        else:
            result = probe(args.device, args.mib, args.descriptors, args.transfers, **common)
    except (RuntimeError, ImportError, OSError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
