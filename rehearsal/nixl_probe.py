"""NIXL READs between two processes on this machine, as vLLM 0.26's NixlConnector makes them (decode reads what
prefill holds): one transfer at a time, then many at once. Says how fast one request's KV moves and whether
transfers of different requests overlap or queue behind each other; no engine, no model, seconds to run.

    python -m rehearsal.nixl_probe [--device cuda|cpu] [--mib 66] [--descriptors 104] [--transfers 16]

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


def probe(device: str, mib: float, descriptors: int, transfers: int, timeout: float = 300.0, op: str = "READ",
          agent_first: bool = False, threads: int = VLLM_UCX_THREADS) -> dict:  # fmt: skip
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
        remote = agent.add_remote_agent(Path(folder, "target.meta").read_bytes())
        remote_descs = agent.deserialize_descs(Path(folder, "target.descs").read_bytes())
        local.zero_()
        agent.register_memory(local)
        regions = [local[i * size : (i + 1) * size] for i in range(transfers)]
        if op == "WRITE":  # the push connector's way: prefill writes into decode's blocks
            local.fill_(1)
        handles = [agent.initialize_xfer(op, agent.get_xfer_descs(_pieces(r, descriptors)), remote_descs, remote)
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
        moved = bool(int(local.min().item()) == 1)  # a WRITE's arrival is the target's to see: not checked here
        serial = sum(one)
        return {
            "device": device,
            "op": op,
            "agent_first": agent_first,
            "ucx_threads": threads,
            "mib_per_transfer": mib,
            "descriptors_per_transfer": descriptors,
            "transfers": transfers,
            "one_at_a_time_ms": round(1000 * serial / len(one), 2),
            "one_at_a_time_gb_per_s": round(size * len(one) / serial / 1e9, 3),
            "all_at_once_ms": round(1000 * together, 2),
            "all_at_once_gb_per_s": round(size * transfers / together / 1e9, 3),
            # 1: the transfers overlapped as well as they could; transfers: they ran one after another.
            "queueing_factor": round(together / (serial / len(one)), 2),
            "data_arrived": moved,
            "ucx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("UCX_")},
        }
    finally:
        Path(folder, "done").write_text("ok")
        child.join(30)


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
    args = parser.parse_args(argv)
    try:
        result = probe(args.device, args.mib, args.descriptors, args.transfers, op=args.op,
                       agent_first=args.agent_first, threads=args.threads)  # fmt: skip
    except (RuntimeError, ImportError, OSError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
