"""The five boxes every stack declares: the network, the cluster and its GPU node pools (or a cluster of the user's
own), the KubeRay operator and the LLM service (docs/architecture.md draws them)."""

import pulumi

import ray_llm_eks.stack_args as args
from ray_llm_eks.adapters import stack
from ray_llm_eks.components.cluster import Cluster
from ray_llm_eks.components.existing_cluster import ExistingCluster
from ray_llm_eks.components.gcs_store import GcsStore
from ray_llm_eks.components.gpu_nodes import GpuNodePool
from ray_llm_eks.components.kuberay import KubeRayOperator
from ray_llm_eks.components.llm_service import LlmService
from ray_llm_eks.components.network import Network
from ray_llm_eks.program.graph import Graph
from ray_llm_eks.program.start import Start


def cluster(start: Start) -> Graph:
    """The VPC, the EKS cluster, the GCS store where the stack has one and the GPU node groups; or, on a cluster this
    stack did not create (docs/operations.md: existing clusters), no AWS resource at all."""
    settings, sealed = start.settings, start.sealed
    if settings.deploy_mode.existing_cluster:
        target = ExistingCluster(
            "existing-cluster",
            args.existing_cluster_args(
                settings, start.secrets.kubeconfig, offline_plan=not stack.deploying(), sealed="kubeconfig" in sealed
            ),
        )
        return Graph(settings, target.provider, [], deferred=[*start.deferred, *target.deferred])
    network = Network("net", args.network_args(settings))
    eks = Cluster("eks", args.cluster_args(settings, network), network=network)
    store = None
    if settings.gcs_ft.redis:  # the head's GCS fault tolerance store (ray_llm_eks/domain/cluster/gcs_ft.py)
        store = GcsStore("gcs-store", args.gcs_store_args(settings, network))
    # With Karpenter or Auto Mode (nodeProvisioning) no GPU node group: NodePools make the GPU nodes (options).
    pools = {
        name: GpuNodePool(name, args.gpu_node_pool_args(pool, eks, network))
        for name, pool in settings.gpu_pools.items()
        if not settings.node_provisioning.by_node_pools
    }
    return Graph(
        settings, eks.provider, [eks.system_nodes, *pools.values()], network, eks, pools, store,
        deferred=list(start.deferred),
    )  # fmt: skip


def kuberay(graph: Graph) -> None:
    if graph.settings.deploy_mode.install_kuberay:
        graph.installed.append(KubeRayOperator("kuberay", args.kuberay_args(graph.settings), graph.on_system_nodes))


def llm_service(graph: Graph, start: Start) -> LlmService:
    store = graph.store
    return LlmService(
        "llm",
        args.llm_service_args(
            graph.settings,
            start.secrets.hf_token,
            start.secrets.api_keys,
            store,
            [graph.cluster.cluster_security_group_id, store.head_security_group_id] if store else [],
            start.sealed,
            start.secrets.ray_auth_token,
        ),
        # The operator outlives the RayService (its finalizer), and so do the plugins and nodes it runs on.
        pulumi.ResourceOptions(providers=[graph.provider], depends_on=[*graph.installed, *graph.nodes]),
    )
