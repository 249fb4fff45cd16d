"""NamespaceNetworkPolicies: the Ray namespace's NetworkPolicies (manifests in
ray_llm_eks/domain/security/network_policies.py),
in place before the Ray pods start."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s


class NamespaceNetworkPolicies(pulumi.ComponentResource):
    """One NetworkPolicy object per manifest; the VPC CNI's policy agent (Cluster) enforces them."""

    def __init__(self, name: str, manifests: list[dict], opts: pulumi.ResourceOptions):
        super().__init__("ray-llm-eks:network_policies:NamespaceNetworkPolicies", name, None, opts)
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{doc['metadata']['name']}",
                metadata=doc["metadata"],
                spec=doc["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            for doc in manifests
        ]
        self.register_outputs({})
