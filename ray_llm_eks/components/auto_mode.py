"""EKS Auto Mode's GPU nodes: one NodePool and one Auto Mode NodeClass per GPU pool
(ray_llm_eks/domain/render/karpenter.py),
in place of the GPU managed node groups, the Cluster Autoscaler and the device plugins. Auto Mode runs
Karpenter inside EKS, so there is no controller, role or queue of ours; the cluster is made with Auto
Mode on (ray_llm_eks/components/cluster.py auto_mode_options), which installs the NodePool and NodeClass CRDs.

The NodeClasses name the node role pulumi-eks created for Auto Mode (its `autoModeNodeRoleName` output):
EKS gives that role, the cluster's computeConfig.nodeRoleArn, its access entry itself; another role would
need an access entry of type EC2 of ours (EKS user guide create-node-class, "Create node class access
entry").

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_eks as eks

from ray_llm_eks.components.observability import custom_object


@dataclass(frozen=True)
class AutoModeNodePoolsArgs:
    """The objects Auto Mode makes the GPU nodes from."""

    node_pools: Sequence[Mapping[str, Any]]
    """NodePool manifests, one per GPU pool (ray_llm_eks/domain/render/karpenter.py node_pool with an Auto Mode node
    class ref)."""
    node_classes: Sequence[Mapping[str, Any]]
    """Auto Mode NodeClass manifests (ray_llm_eks/domain/render/karpenter.py auto_mode_node_class) without spec.role."""


class AutoModeNodePools(pulumi.ComponentResource):
    """Installed with nodeProvisioning: autoMode. Destroy removes the NodePools first (Auto Mode drains and
    terminates their nodes), then the NodeClasses, then the cluster."""

    TYPE = "ray-llm-eks:auto_mode:AutoModeNodePools"

    def __init__(self, name: str, args: AutoModeNodePoolsArgs, cluster: eks.Cluster, opts: pulumi.ResourceOptions):
        """`cluster`: the EKS cluster with Auto Mode on (Cluster.eks_cluster in ray_llm_eks/components/cluster.py)."""
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.node_classes = [
            custom_object(
                f"{name}-{m['metadata']['name']}-class",
                {**m, "spec": {**m["spec"], "role": cluster.auto_mode_node_role_name}},
                child,
            )
            for m in args.node_classes
        ]
        self.node_pools = [
            custom_object(
                f"{name}-{m['metadata']['name']}-pool",
                m,
                pulumi.ResourceOptions(parent=self, depends_on=self.node_classes),
            )
            for m in args.node_pools
        ]
        self.register_outputs({})
