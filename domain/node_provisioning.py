"""How the GPU nodes come and go (stack key `nodeProvisioning`): managed node groups scaled by the
Cluster Autoscaler (the default), or Karpenter, which makes each node for the pods that wait for it
from the pool's NodePool (domain/karpenter.py). EKS Auto Mode is named but not built yet."""

from __future__ import annotations

from dataclasses import dataclass

from domain.config_keys import default
from domain.errors import ConfigError, yaml_text
from domain.facts import PD_ROLES
from domain.versions import ChartPin

MANAGED_NODE_GROUPS, KARPENTER, AUTO_MODE = "managedNodeGroups", "karpenter", "autoMode"
MODES = (MANAGED_NODE_GROUPS, KARPENTER, AUTO_MODE)
# The one role whose nodes may be spot: a reclaimed prefill node costs the requests in their prefill
# step; a decode node would cost every stream it holds.
SPOT_ROLE = PD_ROLES[0]


@dataclass(frozen=True)
class NodeProvisioning:
    mode: str = default("nodeProvisioning")
    prefill_spot: bool = default("prefillSpot")  # prefill nodes may be spot (Karpenter falls back to on-demand)
    karpenter: ChartPin | None = None  # the Karpenter chart, where mode is karpenter

    @property
    def by_karpenter(self) -> bool:
        return self.mode == KARPENTER

    def spot(self, role: str) -> bool:
        """Whether nodes of a pool running this role may be spot."""
        return self.prefill_spot and role == SPOT_ROLE


# Karpenter's interruption queue is named after the cluster; SQS takes names of up to 80 characters
# (botocore sqs CreateQueue QueueName).
QUEUE_NAME_MAX = 80


def parse(mode: str, prefill_spot: bool, karpenter: ChartPin, cluster_name: str) -> NodeProvisioning:
    """The stack's `nodeProvisioning` and `prefillSpot`; `karpenter`: the chart at karpenterVersion."""
    if mode not in MODES:
        raise ConfigError("nodeProvisioning", mode, f"one of {yaml_text(list(MODES))}")
    if mode == AUTO_MODE:
        raise ConfigError(
            "nodeProvisioning", mode, f"{MANAGED_NODE_GROUPS} or {KARPENTER}: {AUTO_MODE} is not available yet"
        )
    if prefill_spot and mode != KARPENTER:
        raise ConfigError(
            "prefillSpot", "true", f"only with nodeProvisioning: {KARPENTER} (a node group has one capacity type)"
        )
    if mode == KARPENTER and len(cluster_name) > QUEUE_NAME_MAX:
        raise ConfigError(
            "clusterName",
            cluster_name,
            f"at most {QUEUE_NAME_MAX} characters with nodeProvisioning: {KARPENTER} (it names the interruption queue)",
        )
    return NodeProvisioning(mode, prefill_spot, karpenter if mode == KARPENTER else None)


def node_line(mode: NodeProvisioning, pool_role: str) -> str:
    """How one GPU pool's nodes are bought, for the cost table's line."""
    if not mode.by_karpenter:
        return ""
    return " (Karpenter: spot first, on-demand price shown)" if mode.spot(pool_role) else " (Karpenter, on-demand)"
