"""Option: the Cluster Autoscaler, where a GPU node group's size may change (not with Karpenter's or Auto Mode's
NodePools, and not on a cluster of the user's own)."""

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscaler
from ray_llm_eks.domain.fit import scaling
from ray_llm_eks.program.graph import Graph


def add(graph: Graph) -> None:
    settings = graph.settings
    by_node_pools = settings.node_provisioning.by_node_pools
    if not graph.existing_cluster and not by_node_pools and scaling.autoscaler_needed(settings.gpu_pools):
        made = ClusterAutoscaler(
            "cluster-autoscaler", args.cluster_autoscaler_args(settings), graph.on_system_nodes, agent=graph.agent()
        )
        graph.installed.append(made)
