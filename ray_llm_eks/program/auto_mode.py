"""Option: EKS Auto Mode makes the GPU nodes (nodeProvisioning autoMode). Like Karpenter's, everything on the GPU nodes
depends on its NodePools, so on destroy they go after them."""

import pulumi

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.auto_mode import AutoModeNodePools
from ray_llm_eks.domain.cluster import node_provisioning
from ray_llm_eks.program.graph import Graph


def warn(graph: Graph) -> None:
    for line in node_provisioning.warnings(graph.settings.node_provisioning):  # what Auto Mode does not allow
        pulumi.log.warn(line)


def add(graph: Graph) -> None:
    if graph.auto_mode_nodes:
        pools = AutoModeNodePools(
            "auto-mode", args.auto_mode_args(graph.settings), graph.cluster.eks_cluster, graph.on_system_nodes
        )
        graph.nodes.append(pools)
