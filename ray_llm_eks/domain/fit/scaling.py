"""Scaling per role, across the three layers that must agree: Ray Serve replicas of the role's LLM
deployment, the KubeRay worker group of its pool (one worker pod per GPU node), and the pool's
managed node group (grown and shrunk by the Cluster Autoscaler).

A role whose serve config (or the stack's `autoscaling` key) sets `autoscaling_config` scales;
its node bounds follow from its replica bounds when the stack leaves them out, and are checked
against them when it sets them, so a bound that one layer could never reach fails before any
resource is declared, naming both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ray_llm_eks.domain.core.errors import UNSET, ConfigError, mapping_of, unknown_field, yaml_text
from ray_llm_eks.domain.core.facts import EFA_RESOURCE, GPU_RESOURCE, GPU_ROLES
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.fit.pool_use import nodes_used
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.placement import GPU_TAINT, gpu_labels
from ray_llm_eks.domain.serving.role_view import ReplicaBounds
from ray_llm_eks.domain.stack.settings import GpuPoolSettings

# Stack key `autoscaling`: {role: {...}} in the stack's spelling -> Ray Serve AutoscalingConfig field.
AUTOSCALING_FIELDS = {
    "minReplicas": "min_replicas",
    "initialReplicas": "initial_replicas",
    "maxReplicas": "max_replicas",
    "targetOngoingRequests": "target_ongoing_requests",
    "downscaleDelayS": "downscale_delay_s",
    "upscaleDelayS": "upscale_delay_s",
}
SHAPE = mapping_of(AUTOSCALING_FIELDS, by=f"roles {yaml_text(GPU_ROLES)}")

# Cluster Autoscaler (cloudprovider/aws/aws_manager.go, chart 9.59.0 / CA 1.35): with no node in a
# group, it builds the would-be node from these ASG tags: labels, taints (value `<value>:<Effect>`)
# and allocatable resources. Without them a pool at zero never grows for pods that select or
# tolerate these or ask for GPUs/EFA.
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"
EFFECT_K8S = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def load(raw: RawConfig) -> dict[str, dict]:
    """The stack's `autoscaling` section (unset: no role autoscales)."""
    return parse_autoscaling(raw.mapping("autoscaling", SHAPE) or {})


def parse_autoscaling(raw: Any) -> dict[str, dict]:
    """The stack's `autoscaling` value as Ray Serve autoscaling_config dicts per role."""
    if not isinstance(raw, dict):
        raise ConfigError("autoscaling", raw, SHAPE)
    configs = {}
    for role, fields in raw.items():
        key = f"autoscaling.{role}"
        if not isinstance(fields, dict) or not fields:
            raise ConfigError(key, fields, mapping_of(AUTOSCALING_FIELDS))
        config = {}
        for name, value in fields.items():
            if name not in AUTOSCALING_FIELDS:
                raise unknown_field(key, name, value, AUTOSCALING_FIELDS)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            whole = name.endswith("Replicas")
            if not number or value < 0 or (whole and not isinstance(value, int)):
                raise ConfigError(f"{key}.{name}", value, "a whole number, 0 or more" if whole else "a number >= 0")
            config[AUTOSCALING_FIELDS[name]] = value
        configs[role] = config
    return configs


def _nodes(replicas: int, bounds: ReplicaBounds, pool: GpuPoolSettings) -> int:
    return nodes_used(replicas, bounds.gpus_per_replica, pool.spec.gpus)


def reconcile_pool(pool: GpuPoolSettings, bounds: ReplicaBounds) -> GpuPoolSettings:
    """The pool's node bounds for its role's replica bounds: derived where the stack leaves them
    out (`pool.given`), refused where they disagree."""
    key, nodes, given = f"gpuPools.{pool.name}", pool.nodes, pool.given
    if not bounds.autoscales:
        if nodes.desired_size < 1:
            raise ConfigError(
                f"{key}.desiredSize",
                nodes.desired_size,
                f"1 or more: {bounds.where} runs on it (it does not autoscale)",
            )
        return pool
    low, initial, high = (_nodes(n, bounds, pool) for n in (bounds.min, bounds.initial, bounds.max))
    per = f"{bounds.gpus_per_replica} GPU(s) per replica, {pool.spec.gpus} per {nodes.instance_type}"
    min_size = nodes.min_size if "minSize" in given else low
    max_size = nodes.max_size if "maxSize" in given else high
    if max_size < high:
        raise ConfigError(
            f"{key}.maxSize",
            max_size,
            f"at least {high}: {bounds.where} needs {high} node(s) at max ({per}); "
            f"raise maxSize or lower autoscaling.{pool.app_role}.maxReplicas",
        )
    if min_size > low:
        raise ConfigError(
            f"{key}.minSize",
            min_size,
            f"at most {low}: {bounds.where} uses {low} node(s) at min ({per}); more would keep GPUs idle that "
            f"the Cluster Autoscaler may not remove; lower minSize or raise autoscaling.{pool.app_role}.minReplicas",
        )
    desired = nodes.desired_size if "desiredSize" in given else min(max(initial, min_size), max_size)
    if not min_size <= desired <= max_size:
        sizes = {"minSize": min_size, "desiredSize": desired, "maxSize": max_size}
        raise ConfigError(key, sizes, "minSize <= desiredSize <= maxSize")
    return replace(pool, nodes=replace(nodes, min_size=min_size, desired_size=desired, max_size=max_size))


def check_shared_role(pools: list[GpuPoolSettings], bounds: ReplicaBounds) -> None:
    """Several pools run one role (Ray places its replicas on any of them): their bounds are the
    stack's to set, and together they must hold max replicas and not exceed min replicas."""
    names = [p.name for p in pools]
    for pool in pools:
        missing = [k for k in ("minSize", "maxSize") if k not in pool.given]
        if bounds.autoscales and missing:
            raise ConfigError(
                f"gpuPools.{pool.name}.{missing[0]}", UNSET, f"set: pools {yaml_text(names)} share role {pool.app_role}"
            )

    def replicas_on(size: str) -> int:
        return sum(getattr(p.nodes, size) * (p.spec.gpus // bounds.gpus_per_replica) for p in pools)

    if replicas_on("max_size") < bounds.max:
        raise ConfigError(
            f"gpuPools.{names[0]}.maxSize",
            {n: p.nodes.max_size for n, p in zip(names, pools, strict=True)},
            f"room for {bounds.max} replica(s) in pools {yaml_text(names)} together: {bounds.where} "
            f"(they hold {replicas_on('max_size')} at maxSize)",
        )
    if bounds.autoscales and replicas_on("min_size") > bounds.min:
        raise ConfigError(
            f"gpuPools.{names[0]}.minSize",
            {n: p.nodes.min_size for n, p in zip(names, pools, strict=True)},
            f"room for at most {bounds.min} replica(s) in pools {yaml_text(names)} together at minSize: {bounds.where} "
            "(more keeps GPUs idle)",
        )


def reconcile_pools(
    pools: Mapping[str, GpuPoolSettings], bounds: Mapping[str, ReplicaBounds]
) -> dict[str, GpuPoolSettings]:
    """Each pool's node bounds from its role's replica bounds (`bounds`: each role's of the serve document)."""
    reconciled = dict(pools)
    for role, role_bound in bounds.items():
        mine = [p for p in pools.values() if p.app_role == role]
        if len(mine) > 1:
            check_shared_role(mine, role_bound)
            continue
        (pool,) = mine
        reconciled[pool.name] = reconcile_pool(pool, role_bound)
    return reconciled


def pool_scales(min_size: int, max_size: int) -> bool:
    """The Cluster Autoscaler may change the size of a pool with these bounds."""
    return min_size < max_size


def autoscaler_needed(pools: Mapping[str, GpuPoolSettings]) -> bool:
    return any(pool_scales(p.nodes.min_size, p.nodes.max_size) for p in pools.values())


def node_template_tags(pool_name: str, spec: aws_facts.InstanceSpec, efa: bool) -> dict[str, str]:
    """ASG tags that describe a node of this pool (of instance type `spec`) to the Cluster Autoscaler when the
    pool has none: the labels our pods select, the GPU taint they tolerate, and the devices they request."""
    tags = {f"{NODE_TEMPLATE}/label/{k}": v for k, v in gpu_labels(pool_name).items()}
    tags[f"{NODE_TEMPLATE}/taint/{GPU_TAINT['key']}"] = f"{GPU_TAINT['value']}:{EFFECT_K8S[GPU_TAINT['effect']]}"
    tags[f"{NODE_TEMPLATE}/resources/{GPU_RESOURCE}"] = str(spec.gpus)
    if efa:
        tags[f"{NODE_TEMPLATE}/resources/{EFA_RESOURCE}"] = str(spec.network_cards)
    return tags
