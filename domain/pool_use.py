"""GPU nodes the serving app leaves idle: a pool whose desiredSize exceeds what its replicas use pays
for GPUs nothing runs on (nothing scales the pools down by itself). A warning, not an error: a spare
node kept warm on purpose is a choice, which the stack file should then say."""

from __future__ import annotations

import math
from collections.abc import Mapping

from domain.serve_config import llm_configs_by_role
from domain.settings import GpuPoolSettings


def nodes_used(replicas: int, gpus_per_replica: int, gpus_per_node: int) -> int:
    """Nodes the replicas occupy: a replica within one node is packed whole onto one (STRICT_PACK);
    a larger one (pipeline parallel) spans ceil(gpus / gpus_per_node) nodes."""
    if gpus_per_replica <= gpus_per_node:
        return math.ceil(replicas / (gpus_per_node // gpus_per_replica))
    return replicas * math.ceil(gpus_per_replica / gpus_per_node)


def idle_node_warnings(document: dict, pools: Mapping[str, GpuPoolSettings]) -> list[str]:
    """One line per pool that runs more nodes than the rendered serve config's replicas use."""
    warnings = []
    for role, config in sorted(llm_configs_by_role(document, "rendered").items()):
        mine = [p for p in pools.values() if p.app_role == role]
        engine = config.get("engine_kwargs") or {}
        deployment = config.get("deployment_config") or {}
        if "autoscaling_config" in deployment or len(mine) != 1:
            continue  # replicas vary, or Ray spreads them over several pools: spare nodes are room
        (pool,) = mine
        replicas = deployment.get("num_replicas", 1)
        per_replica = engine.get("tensor_parallel_size", 1) * engine.get("pipeline_parallel_size", 1)
        used = nodes_used(replicas, per_replica, pool.spec.gpus)
        if pool.nodes.desired_size > used:
            idle = pool.nodes.desired_size - used
            warnings.append(
                f"gpuPools.{role}.desiredSize = {pool.nodes.desired_size}: {replicas} {role} replica(s) x "
                f"{per_replica} GPU(s) use {used} {pool.nodes.instance_type} node(s), {idle} would run idle; "
                f"set replicas.{role} (or desiredSize/minSize {used}), or say in the stack file why the spare stays"
            )
    return warnings
