"""NetworkPolicies of the Ray namespace, as plain manifests: ingress denied by default; Ray pods
reach each other on every port (GCS, raylet, object manager, NIXL side channels); from outside the
namespace only the serve port, and only from the configured client namespaces. The dashboard
(8265) and Ray client (10001) are thereby reachable only by `kubectl port-forward`, which enters
through the kubelet, not the pod network."""

from __future__ import annotations

from domain.hardening import HardeningSettings
from domain.ray_service import SERVE_PORT

# KubeRay labels every pod of a RayCluster with it (ray-operator v1.7.0 common/pod.go).
RAY_POD_SELECTOR = {"matchLabels": {"ray.io/is-ray-node": "yes"}}


def _policy(name: str, namespace: str, spec: dict) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def network_policies(namespace: str, hardening: HardeningSettings) -> list[dict]:
    policies = [
        _policy("default-deny-ingress", namespace, {"podSelector": {}, "policyTypes": ["Ingress"]}),
        _policy(
            "ray-pods-to-ray-pods",
            namespace,
            {
                "podSelector": RAY_POD_SELECTOR,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": RAY_POD_SELECTOR}]}],  # same namespace only
            },
        ),
    ]
    if hardening.internal_endpoint and hardening.endpoint_vpc_cidr:
        # The NLB (IP targets) reaches the pods from its own addresses in the VPC; its security group
        # admits only endpointSourceRanges. Pods of the VPC share that range: the key check stays.
        policies.append(
            _policy(
                "serve-port-from-load-balancer",
                namespace,
                {
                    "podSelector": RAY_POD_SELECTOR,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"ipBlock": {"cidr": hardening.endpoint_vpc_cidr}}],
                            "ports": [{"protocol": "TCP", "port": SERVE_PORT}],
                        }
                    ],
                },
            )
        )
    if hardening.serve_client_namespaces:
        selector = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",  # set on every namespace by the API server
                    "operator": "In",
                    "values": list(hardening.serve_client_namespaces),
                }
            ]
        }
        policies.append(
            _policy(
                "serve-port-from-clients",
                namespace,
                {
                    "podSelector": RAY_POD_SELECTOR,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {"from": [{"namespaceSelector": selector}], "ports": [{"protocol": "TCP", "port": SERVE_PORT}]}
                    ],
                },
            )
        )
    return policies
