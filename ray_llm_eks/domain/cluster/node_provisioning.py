"""How the GPU nodes come and go (stack key `nodeProvisioning`): managed node groups scaled by the
Cluster Autoscaler (the default); Karpenter, which makes each node for the pods that wait for it
from the pool's NodePool (ray_llm_eks/domain/render/karpenter.py); or EKS Auto Mode, AWS's own Karpenter, from the same
NodePools over Auto Mode's NodeClass, for stacks without PD pools (AUTO_MODE_NO_PD says why)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import PD_ROLES
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform.field_checks import chart_pin
from ray_llm_eks.domain.platform.versions import KARPENTER_CHART, ChartPin

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

    @property
    def by_auto_mode(self) -> bool:
        return self.mode == AUTO_MODE

    @property
    def by_node_pools(self) -> bool:
        """Karpenter's NodePools make the GPU nodes (ours, or Auto Mode's): no GPU node group, no Cluster Autoscaler."""
        return self.mode in (KARPENTER, AUTO_MODE)

    def spot(self, role: str) -> bool:
        """Whether nodes of a pool running this role may be spot."""
        return self.prefill_spot and role == SPOT_ROLE


# Karpenter's interruption queue is named after the cluster; SQS takes names of up to 80 characters
# (botocore sqs CreateQueue QueueName).
QUEUE_NAME_MAX = 80


def load(raw: RawConfig, cluster_name: str) -> NodeProvisioning:
    """The stack's `nodeProvisioning`, `prefillSpot` and `karpenterVersion`."""
    karpenter = chart_pin(raw, "karpenterVersion", KARPENTER_CHART)
    return parse(raw.text("nodeProvisioning"), raw.boolean("prefillSpot"), karpenter, cluster_name)


def parse(mode: str, prefill_spot: bool, karpenter: ChartPin, cluster_name: str) -> NodeProvisioning:
    """The stack's `nodeProvisioning` and `prefillSpot`; `karpenter`: the chart at karpenterVersion."""
    if mode not in MODES:
        raise ConfigError("nodeProvisioning", mode, f"one of {yaml_text(list(MODES))}")
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


# Why a stack with PD pools cannot take Auto Mode. Auto Mode's NodeClass (eks.amazonaws.com/v1) has
# no per-device network interfaces and no placement group selector in the field list AWS documents
# (EKS user guide create-node-class, "Node Class Specification": role, subnetSelectorTerms,
# securityGroupSelectorTerms, snatPolicy, networkPolicy, networkPolicyEventLogs, ephemeralStorage, tags);
# the EKS user guide's device-management-efa names Karpenter, managed and self-managed node groups for
# per-device EFA and placement groups and lists Auto Mode as coming; no public NodeClass CRD was found to
# say otherwise. Our PD pools need both (EFA for NIXL's KV transfer, one cluster placement group each).
AUTO_MODE_NO_PD = (
    f"{MANAGED_NODE_GROUPS} or {KARPENTER} for a stack with PD pools: Auto Mode's NodeClass sets no EFA"
    " interfaces and no placement group, which NIXL's KV transfer needs (docs/scaling.md)"
)


def check_pools(mode: NodeProvisioning, efa_pools: list[str]) -> None:
    """Auto Mode takes stacks whose GPU pools need no EFA (collocated ones) only."""
    if mode.by_auto_mode and efa_pools:
        raise ConfigError("nodeProvisioning", AUTO_MODE, AUTO_MODE_NO_PD)


# What Auto Mode does not allow, said at `pulumi up` and in `make plan`. Sources: EKS user guide (its
# awsdocs/amazon-eks-user-guide source) auto-mng.adoc (Bottlerocket required, no custom AMI, no custom
# CNI, no SSH), auto-security.adoc (EC2 managed instances live at most 21 days), automode.adoc (AMIs
# immutable with a read-only root file system; NVIDIA drivers and device plugin included).
AUTO_MODE_LIMITS = (
    "nodeProvisioning autoMode: AWS picks the GPU nodes' AMI (Bottlerocket-based, NVIDIA driver and device"
    " plugin included): gpuAmiReleaseVersion and the RAID0 instance store of node groups and Karpenter do"
    " not apply (the model cache lives where Auto Mode's disk layout puts it, unverified here); nodes are"
    " replaced within 21 days (a serving replica restarts); no custom AMI, user data, SSH or IMDS hop"
    " setting; EKS adds a per-instance management fee (docs/scaling.md)"
)


def warnings(mode: NodeProvisioning) -> list[str]:
    return [AUTO_MODE_LIMITS] if mode.by_auto_mode else []


def node_line(mode: NodeProvisioning, pool_role: str) -> str:
    """How one GPU pool's nodes are bought, for the cost table's line."""
    if mode.by_auto_mode:
        return " (EKS Auto Mode, on-demand)"
    if not mode.by_karpenter:
        return ""
    return " (Karpenter: spot first, on-demand price shown)" if mode.spot(pool_role) else " (Karpenter, on-demand)"
