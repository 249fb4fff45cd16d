"""Roles as data: GPU pools are named freely and run one of the serve config's roles (prefill,
decode: build_pd_openai_app; collocated: build_openai_app), so a second pool of a role (e.g. decode
on another instance type) is a stack change. Ray places a role's replicas on any pool that offers
the role's resource (ray_llm_eks/domain/serving/serve_config.py role_resource)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import GPU_ROLES
from ray_llm_eks.domain.serving.serve_config import PoolShape
from ray_llm_eks.domain.stack.settings import GpuPoolSettings

# The name becomes a node group, a node label value and a Ray worker group name: one short DNS label.
POOL_NAME = re.compile(r"[a-z]([-a-z0-9]{0,30}[a-z0-9])?")


def pool_serves(name: str, pool_raw: Any) -> str | None:
    """The role a pool names in `serves`, or None for a pool named after its role."""
    serves = pool_raw.get("serves") if isinstance(pool_raw, dict) else None
    if serves is None:
        if name not in GPU_ROLES:
            allowed = f"a pool role from {yaml_text(GPU_ROLES)}, or a pool that sets `serves: <role>`"
            raise ConfigError(f"gpuPools.{name}", pool_raw, allowed)
        return None
    if not isinstance(serves, str) or serves not in GPU_ROLES:
        # One role a pool: the placement rule keeps prefill and decode off each other's nodes (docs/known-issues.md).
        raise ConfigError(
            f"gpuPools.{name}.serves",
            serves,
            f"one role of the serve config (one pool each), one of {yaml_text(GPU_ROLES)}",
        )
    if not POOL_NAME.fullmatch(name):
        raise ConfigError(f"gpuPools.{name}", name, "a pool name of at most 32 lowercase letters, digits and '-'")
    return serves


def role_shapes(pools: Mapping[str, GpuPoolSettings]) -> dict[str, PoolShape]:
    """What the renderer knows of the pools that run each role. Several pools of one role: the GPU
    model only if they share it, the smallest node's GPU count (tensor parallelism must fit each),
    and their GPUs together, counted in nodes of that size."""
    shapes = {}
    for role in dict.fromkeys(p.app_role for p in pools.values()):
        mine = [p for p in pools.values() if p.app_role == role]
        gpus = min(p.spec.gpus for p in mine)
        models = {p.spec.gpu_model for p in mine}
        shapes[role] = PoolShape(
            "+".join(p.nodes.instance_type for p in mine),
            models.pop() if len(models) == 1 else None,
            gpus,
            sum(p.nodes.desired_size * p.spec.gpus for p in mine) // gpus,
        )
    return shapes
