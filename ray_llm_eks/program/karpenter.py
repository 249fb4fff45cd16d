"""Option: Karpenter makes the GPU nodes (nodeProvisioning karpenter). Everything on the GPU nodes depends on it, so on
destroy the RayService, plugins and exporters go first, then its NodePools (Karpenter drains and terminates their
nodes), then Karpenter."""

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.karpenter import Karpenter
from ray_llm_eks.program.graph import Graph


def add(graph: Graph) -> None:
    if graph.karpenter_nodes:
        eks = graph.cluster.eks_cluster
        karpenter = Karpenter(
            "karpenter", args.karpenter_args(graph.settings), eks, graph.agent(), graph.on_system_nodes
        )
        graph.nodes.append(karpenter)
