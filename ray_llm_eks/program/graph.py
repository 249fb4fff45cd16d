"""What the program has declared so far, handed from box to option: the stack's settings, the Kubernetes provider and
the nodes (which everything on them waits for, and which outlive it on destroy), and what the LLM service waits for."""

from dataclasses import dataclass, field

import pulumi

from ray_llm_eks.components.cluster import Cluster
from ray_llm_eks.components.gcs_store import GcsStore
from ray_llm_eks.components.gpu_nodes import GpuNodePool
from ray_llm_eks.components.network import Network
from ray_llm_eks.components.pod_identity import PodIdentityAgent
from ray_llm_eks.domain.stack.settings import Settings
from ray_llm_eks.stack_args import pod_identity_agent_version


@dataclass
class Graph:
    settings: Settings
    provider: pulumi.ProviderResource  # the stack's Kubernetes provider
    nodes: list[pulumi.Resource]  # the system nodes first, then the GPU node pools or NodePools' owners
    network: Network | None = None  # on the cluster the stack builds
    cluster: Cluster | None = None  # on the cluster the stack builds
    pools: dict[str, GpuNodePool] = field(default_factory=dict)  # GPU node groups by name (none with NodePools)
    store: GcsStore | None = None  # the GCS fault tolerance store, with gcsFaultTolerance redis
    # What the RayService waits for (and what outlives it): controllers, plugins, the operator.
    installed: list[pulumi.Resource] = field(default_factory=list)
    monitoring: list[pulumi.Resource] = field(default_factory=list)  # the in-cluster monitoring stack
    deferred: list[str] = field(default_factory=list)  # checks an offline plan could not make
    _agent: PodIdentityAgent | None = None

    @property
    def existing_cluster(self) -> bool:
        return self.settings.deploy_mode.existing_cluster

    @property
    def karpenter_nodes(self) -> bool:
        """Karpenter makes the GPU nodes (nodeProvisioning karpenter, on the cluster the stack builds)."""
        return not self.existing_cluster and self.settings.node_provisioning.by_karpenter

    @property
    def auto_mode_nodes(self) -> bool:
        """EKS Auto Mode makes the GPU nodes (nodeProvisioning autoMode, on the cluster the stack builds)."""
        return not self.existing_cluster and self.settings.node_provisioning.by_auto_mode

    @property
    def on_system_nodes(self) -> pulumi.ResourceOptions:
        """In-cluster pieces use the stack's provider; the system nodes run them (create) and outlive them (destroy)."""
        return pulumi.ResourceOptions(providers=[self.provider], depends_on=self.nodes[:1])

    def agent(self) -> PodIdentityAgent:
        """The one Pod Identity agent, made for the first controller with an AWS role that asks for it."""
        if self._agent is None:
            self._agent = PodIdentityAgent(
                "pod-identity-agent",
                self.settings.cluster.name,
                self.settings.cluster.kubernetes_version,
                self.on_system_nodes,
                pod_identity_agent_version(self.settings),
            )
        return self._agent
