"""What makes a topology that topology, as the rehearsal checks it: the replicas each role starts with, that
every replica served, and (PD) that the decode engine read KV from every prefill replica. Pure Python over
what Ray and vLLM report (Serve's REST API status, Ray's Prometheus text, engine logs): `make test` checks it.
"""

from __future__ import annotations

import re
from collections import Counter

from llmclient import core
from ray_llm_eks.domain.serving.role_view import RoleView, views_of
from ray_llm_eks.domain.serving.serve_app import parse_document
from ray_llm_eks.domain.serving.serve_config import role_of

# vLLM 0.26's NIXL worker names its engine at start (nixl/base_worker.py, "Initializing NIXL worker %s"); Ray
# Serve LLM makes the id unique per replica (ray/llm/.../kv_transfer/nixl.py: "<suffix>-<host>-<port>").
ENGINE_ID = re.compile(r"Initializing NIXL worker (\S+)")
# The pull side names the remote engine of every KV read, at DEBUG (nixl/pull_worker.py _read_blocks_for_req).
KV_READ = re.compile(r"Remote agent (\S+) available, calling _read_blocks")


def role_views(doc: dict) -> dict[str, RoleView]:
    """The view of each role of a serve document as deployed (plain data: the plan's, or this machine's copy)."""
    return views_of(parse_document(doc, "rehearsal").roles)


def expected_replicas(doc: dict) -> dict[str, int]:
    """role -> replicas at start, from the serve config as deployed (one model per stack: a role is one config)."""
    return {role: view.replicas.initial for role, view in role_views(doc).items()}


def running_replicas(application: dict) -> dict[str, list[dict]]:
    """role -> RUNNING replicas of the LLM deployments, from Serve's REST API (ApplicationDetails as JSON)."""
    found: dict[str, list[dict]] = {}
    for name, deployment in (application.get("deployments") or {}).items():
        role = role_of(name)
        if role is None:
            continue
        running = [dict(r, deployment=name) for r in deployment.get("replicas") or [] if r.get("state") == "RUNNING"]
        found.setdefault(role, []).extend(running)
    return found


def replica_mismatches(expected: dict[str, int], running: dict[str, list[dict]]) -> list[str]:
    """One line per role whose RUNNING replicas differ from what the serve config asks at start."""
    return [
        f"{role}: {len(running.get(role, []))} RUNNING replica(s), the serve config asks {want} at start"
        for role, want in sorted(expected.items())
        if len(running.get(role, [])) != want
    ] + [f"{role}: {len(reps)} RUNNING replica(s), the serve config has no such role" for role, reps in
         sorted(running.items()) if role not in expected]  # fmt: skip


def requests_per_replica(metrics_text: str) -> dict[str, float]:
    """replica id -> requests it handled so far (summed over routes), from Ray's Prometheus text."""
    counts: dict[str, float] = {}
    for labels, value in core.request_counters(metrics_text):
        # Serve tags each replica's metrics with its id (ray/serve/metrics.py REPLICA_TAG "replica").
        if replica := labels.get("replica"):
            counts[replica] = counts.get(replica, 0.0) + value
    return counts


def idle_replicas(running: dict[str, list[dict]], served: dict[str, float]) -> list[str]:
    """`role/replica_id` of each RUNNING LLM replica that has handled no request."""
    return [f"{role}/{r['replica_id']}" for role, reps in sorted(running.items()) for r in reps
            if served.get(r["replica_id"], 0) < 1]  # fmt: skip


def engine_id(log_text: str) -> str | None:
    """The NIXL engine id a replica's engine logged at start (None: no NIXL in that log)."""
    match = ENGINE_ID.search(log_text)
    return match.group(1) if match else None


def kv_reads(log_text: str) -> Counter[str]:
    """remote engine id -> KV reads the pulling (decode) engine made from it."""
    return Counter(KV_READ.findall(log_text))


def prefills_not_read(prefill_engines: dict[str, str | None], reads: Counter[str]) -> list[str]:
    """Prefill replicas (replica id -> engine id) no decode engine read KV from, one line each."""
    lines = []
    for replica, engine in sorted(prefill_engines.items()):
        if engine is None:
            lines.append(f"prefill/{replica}: no NIXL engine id in its log")
        elif reads.get(engine, 0) < 1:
            lines.append(f"prefill/{replica} (engine {engine}): no decode engine read KV from it")
    return lines


# Handed to vLLM through VLLM_LOGGING_CONFIG_PATH (PD only): vLLM's own format and INFO level
# (vllm/logger.py DEFAULT_LOGGING_CONFIG), plus DEBUG for the NIXL pull worker alone, which then names the
# prefill engine of each KV read (KV_READ). It changes what is logged, nothing that is served.
PULL_WORKER_LOGGER = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker"


def vllm_logging_config() -> dict:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "vllm": {
                "class": "vllm.logging_utils.NewLineFormatter",
                "datefmt": "%m-%d %H:%M:%S",
                "format": "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s",
            }
        },
        "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "stream": "ext://sys.stdout"}},
        "loggers": {
            "vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
            PULL_WORKER_LOGGER: {"level": "DEBUG"},
        },
    }


# vLLM titles each multiprocessing worker by its ranks (vLLM 0.26.0 v1/executor/multiproc_executor.py
# WorkerProc.setup_proc_title_and_log_prefix), e.g.
# VLLM::Worker_TP1 or VLLM::Worker_DP0_TP1.
_TP_RANK = re.compile(r"::Worker\S*_TP(\d+)\b")


def tensor_parallel_size(doc: dict) -> int:
    """The largest tensor_parallel_size among the LLM configs (1: no tensor parallelism)."""
    return max(view.tensor_parallel for view in role_views(doc).values())


def rank_seconds(process_seconds: dict[str, float]) -> dict[int, float]:
    """TP rank -> CPU seconds its worker processes used (rehearsal.cpu_threads.process_seconds)."""
    ranks: dict[int, float] = {}
    for name, seconds in process_seconds.items():
        if match := _TP_RANK.search(name):
            ranks[int(match.group(1))] = ranks.get(int(match.group(1)), 0.0) + seconds
    return ranks


def idle_ranks(ranks: dict[int, float], tp: int) -> list[str]:
    """One line per TP rank that used no CPU while requests were served (or has no worker process)."""
    return [f"TP rank {rank}: " + ("no worker process" if rank not in ranks else "used no CPU during the requests")
            for rank in range(tp) if ranks.get(rank, 0.0) <= 0.0]  # fmt: skip


def targets(application: dict) -> dict[str, int]:
    """role -> replicas Serve currently aims at for the LLM deployments (target_num_replicas, REST API)."""
    found: dict[str, int] = {}
    for name, deployment in (application.get("deployments") or {}).items():
        if (role := role_of(name)) is not None:
            found[role] = found.get(role, 0) + int(deployment.get("target_num_replicas", 0))
    return found


def scaled_alone(start: dict[str, int], now: dict[str, int], role: str) -> list[str]:
    """Problems with a scale-up meant for `role` only: it did not rise, or another role's target moved."""
    problems = [] if now.get(role, 0) > start.get(role, 0) else [f"{role}: target stayed {now.get(role, 0)}"]
    return problems + [f"{other}: target moved {start[other]} -> {now.get(other, 0)}" for other in sorted(start)
                       if other != role and now.get(other, 0) != start[other]]  # fmt: skip


def logical_cpus(doc: dict, extra: dict[str, int] | None = None, floor: int = 8) -> int:
    """Ray CPUs to declare on this node so every engine schedules (they are a count, not cores): Ray Serve LLM
    asks 1 CPU for each replica actor merged with one CPU bundle per TP rank (ray/llm/_internal/serve/core/
    server/llm_server.py get_deployment_options), plus the ingress and one to spare. `extra`: more replicas."""
    need = 2
    for role, view in role_views(doc).items():
        replicas = view.replicas.initial + (extra or {}).get(role, 0)
        need += replicas * (1 + view.tensor_parallel)
    return max(floor, need)
