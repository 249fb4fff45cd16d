"""GPUs the serving app leaves idle: a pool whose nodes hold more GPUs than its role's replicas use pays
for GPUs nothing runs on (nothing scales the pools down by itself). Counted in GPUs, not nodes: one
replica on a 4-GPU node leaves 3 idle. The Ray worker pod asks for all of its node's GPUs on purpose: it
is the one Ray node on that Kubernetes node, where Ray places further replicas; asking for fewer would
free them for nothing (the pool's taint keeps other pods off) and leave no room for a second replica.
A warning, not an error: a spare kept warm on purpose is a choice, which the stack file should then say.
Each way to use them it names passes the stack's own checks first (ray_llm_eks/adapters/stack.py
changed_stack_passes; a serve-file tensor_parallel_size, ray_llm_eks/domain/fit/model_fit.py check_role)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.serving.llm_config import LlmConfig
from ray_llm_eks.domain.serving.role_view import RoleView
from ray_llm_eks.domain.stack import cost
from ray_llm_eks.domain.stack.settings import GpuPoolSettings, ServingSettings, Settings


def nodes_used(replicas: int, gpus_per_replica: int, gpus_per_node: int) -> int:
    """Nodes the replicas occupy: a replica within one node is packed whole onto one (STRICT_PACK);
    a larger one (pipeline parallel) spans ceil(gpus / gpus_per_node) nodes."""
    if gpus_per_replica <= gpus_per_node:
        return math.ceil(replicas / (gpus_per_node // gpus_per_replica))
    return replicas * math.ceil(gpus_per_replica / gpus_per_node)


@dataclass(frozen=True)
class PoolGpus:
    """One role's pool, counted in GPUs: at desiredSize for a fixed number of replicas, at maxSize and
    max_replicas for an autoscaling role (GPUs idle even then are never used)."""

    role: str
    pool: GpuPoolSettings
    replicas: int
    tensor_parallel: int
    pipeline_parallel: int
    autoscales: bool

    @property
    def nodes(self) -> int:
        return self.pool.nodes.max_size if self.autoscales else self.pool.nodes.desired_size

    @property
    def per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def gpus(self) -> int:
        return self.nodes * self.pool.spec.gpus

    @property
    def used(self) -> int:
        return self.replicas * self.per_replica

    @property
    def idle(self) -> int:
        return self.gpus - self.used

    @property
    def idle_nodes(self) -> int:
        return self.nodes - nodes_used(self.replicas, self.per_replica, self.pool.spec.gpus)


def pool_gpus(roles: Mapping[str, RoleView], pools: Mapping[str, GpuPoolSettings]) -> dict[str, PoolGpus]:
    """Per role that runs on exactly one pool, its GPUs (roles spread over several pools are left out:
    Ray places their replicas on any of them, so a spare node there is room)."""
    counted = {}
    for role, view in sorted(roles.items()):
        mine = [p for p in pools.values() if p.app_role == role]
        if len(mine) == 1:
            bounds = view.replicas
            counted[role] = PoolGpus(
                role, mine[0], bounds.max, view.tensor_parallel, view.pipeline_parallel, bounds.autoscales
            )
    return counted


def _usd(value: float) -> str:
    return f"{value:.2f} $/h"


# Whether the stack with some of its keys changed (key path -> value, e.g. {"replicas.prefill": 4}) passes
# every check of loading it (ray_llm_eks/adapters/stack.py changed_stack_passes): what a suggestion must pass first.
Passes = Callable[[Mapping[str, Any]], bool]


def _said(changes: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in changes.items())


def _replicas(role: str, use: PoolGpus, passes: Passes) -> list[str]:
    """More replicas on the GPUs the pool has (the engine, so its fit, unchanged)."""
    more = use.gpus // use.per_replica
    changes = {f"autoscaling.{role}.maxReplicas" if use.autoscales else f"replicas.{role}": more}
    return [_said(changes)] if more > use.replicas and passes(changes) else []


def _tensor_parallel(
    role: str, use: PoolGpus, config: LlmConfig, serving: ServingSettings, table: aws_facts.InstanceTable
) -> list[str]:
    """The largest tensor_parallel_size the replicas still fit the pool's nodes with, passing the role's
    checks (check_role: one node, vLLM's head rules, the memory fit). A serve-file change, so not for PD
    roles, whose prefill and decode sizes are chosen together (NIXL maps one side's ranks onto the other's)."""
    if config.engine.kv_transfer_config is not None:
        return []
    pool, derived = use.pool, use.role in serving.max_num_seqs_derived
    wider = [
        tp
        for tp in range(use.tensor_parallel + 1, pool.spec.gpus + 1)
        if nodes_used(use.replicas, tp * use.pipeline_parallel, pool.spec.gpus) <= use.nodes
        and model_fit.accepts(
            config, use.role, pool.nodes.instance_type, pool.efa, serving.model_spec, derived, tp, table
        )
    ]
    return [f"{use.role} engine_kwargs.tensor_parallel_size {wider[-1]} in the serve file"] if wider else []


def _smaller_type(
    use: PoolGpus, prices: Mapping[str, float], passes: Passes, table: aws_facts.InstanceTable
) -> list[str]:
    """The cheapest type with fewer GPUs per node that holds the replicas and passes the stack's checks."""
    pool, now = use.pool, prices.get(use.pool.nodes.instance_type)
    key, size = f"gpuPools.{pool.name}", "maxSize" if use.autoscales else "desiredSize"
    candidates = []
    for name, spec in table.items():
        nodes = nodes_used(use.replicas, use.per_replica, spec.gpus) if spec.gpus >= use.per_replica else 0
        price = prices.get(name)
        if not nodes or spec.gpus >= pool.spec.gpus:
            continue
        if now is not None and (price is None or nodes * price >= use.nodes * now):
            continue  # known to be no cheaper
        candidates.append((price is None, nodes * (price or 0), spec.gpus, name, nodes))
    for unpriced, total, _, name, nodes in sorted(candidates):
        changes: dict[str, Any] = {f"{key}.instanceType": name}
        if nodes != use.nodes:
            changes[f"{key}.{size}"] = nodes
        if not passes(changes):
            continue
        cost_now = "price unknown" if now is None else _usd(use.nodes * now)
        return [f"{_said(changes)} ({'price unknown' if unpriced else _usd(total)} instead of {cost_now})"]
    return []


def idle_gpu_warnings(settings: Settings, passes: Passes) -> list[str]:
    """One line per pool whose GPUs its role's replicas leave idle: how many, what they cost, and what
    would use them."""
    prices = cost.instance_prices(settings.region, settings.prices)
    configs = settings.serving.serve_document.roles
    warnings = []
    for role, use in pool_gpus(settings.serving.roles, settings.gpu_pools).items():
        if use.idle <= 0:
            continue
        pool, spec = use.pool, use.pool.spec
        price = prices.get(pool.nodes.instance_type)
        paid = (
            f"at {_usd(price * use.idle / spec.gpus)}"
            if price is not None
            else f"at a price unknown ({pool.nodes.instance_type} in {settings.region}: set prices.instances)"
        )
        if use.idle_nodes > 0 and not use.autoscales:
            used = use.nodes - use.idle_nodes
            warnings.append(
                f"gpuPools.{pool.name}.desiredSize = {use.nodes}: {use.replicas} {role} replica(s) x "
                f"{use.per_replica} GPU(s) use {used} {pool.nodes.instance_type} node(s), {use.idle_nodes} would "
                f"run idle ({use.idle} GPU(s) {paid}); set replicas.{role} (or desiredSize/minSize {used}), or say "
                "in the stack file why the spare stays"
            )
            continue
        ideas = [
            *_replicas(role, use, passes),
            *_tensor_parallel(role, use, configs[role], settings.serving, settings.instance_types),
            *_smaller_type(use, prices, passes, settings.instance_types),
        ]
        replicas = f"{role} max_replicas {use.replicas}" if use.autoscales else f"{use.replicas} {role} replica(s)"
        at_max = " at maxSize" if use.autoscales else ""
        way_out = f"to use them: {'; or '.join(ideas)}; " if ideas else ""
        warnings.append(
            f"gpuPools.{pool.name}.instanceType = {pool.nodes.instance_type}: {replicas} x {use.per_replica} GPU(s) "
            f"use {use.used} of {use.gpus} GPUs ({use.nodes} node(s){at_max} x {spec.gpus}), {use.idle} idle {paid}; "
            f"{way_out}or say in the stack file why they stay idle"
        )
    return warnings
