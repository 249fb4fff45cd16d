"""NetworkPolicies of the Ray namespace, as plain manifests: ingress denied by default; Ray pods
reach each other on every port (GCS, raylet, object manager, NIXL side channels); from outside the
namespace only the serve port (from the configured client namespaces and the load balancer), and
the head's dashboard port from the KubeRay operator's namespace, which manages Serve through it.
For people, the dashboard (8265) and Ray client (10001) are reachable only by `kubectl
port-forward`, which enters through the kubelet, not the pod network."""

from __future__ import annotations

from ray_llm_eks.domain.core.facts import (
    HEAD_PORTS,
    INSTANCE_METADATA_CIDR,
    KUBERAY_NAMESPACE,
    OPERATOR_NAMESPACE_ANNOTATION,
    PROMETHEUS_NAMESPACE_ANNOTATION,
    SERVE_PORT,
)
from ray_llm_eks.domain.security.hardening import HardeningSettings
from ray_llm_eks.domain.telemetry import observability
from ray_llm_eks.domain.telemetry.observability import ObservabilitySettings

# KubeRay labels every pod of a RayCluster with it (ray-operator v1.7.0 common/pod.go).
RAY_POD_SELECTOR = {"matchLabels": {"ray.io/is-ray-node": "yes"}}
HEAD_POD_SELECTOR = {"matchLabels": {"ray.io/node-type": "head"}}  # the same file, RayNodeTypeLabelKey
# The operator's pods, as the kuberay-operator chart labels them (v1.7.0 templates/deployment.yaml, the chart's name).
OPERATOR_POD_SELECTOR = {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}}


def namespace_selector(*names: str) -> dict:
    """Namespaces by name: the API server labels every namespace kubernetes.io/metadata.name."""
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(names)}]}


def _policy(name: str, namespace: str, spec: dict, annotations: dict | None = None) -> dict:
    metadata = {"name": name, "namespace": namespace} | ({"annotations": annotations} if annotations else {})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata, "spec": spec}


# Names the operator's namespace on the policy that opens the dashboard to it, for the policy pack
# (policy/rules.py keeps the same name): an existing cluster may run KubeRay elsewhere.


def network_policies(
    namespace: str,
    hardening: HardeningSettings,
    operator_namespace: str = KUBERAY_NAMESPACE,
    obs: ObservabilitySettings | None = None,
) -> list[dict]:
    # Egress anywhere but the node's instance metadata, whose credentials are the node role's. EKS Pod
    # Identity's agent (169.254.170.23 port 80: aws/eks-pod-identity-agent configuration/config.go,
    # cmd/server.go), where the workers of an s3:// modelSource get their credentials, stays reachable
    # through 0.0.0.0/0; no rule of its own, since the policy agent merges the port lists of overlapping
    # CIDRs into the narrowest (aws-network-policy-agent #180). `except` needs agent v1.0.4 or later (the
    # same repository, #92 and #120).
    egress = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [INSTANCE_METADATA_CIDR]}}]}]
    policies = [
        _policy("default-deny-ingress", namespace, {"podSelector": {}, "policyTypes": ["Ingress"]}),
        _policy(
            "egress-except-instance-metadata",
            namespace,
            {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress},
        ),
    ]
    policies += [
        _policy(
            "ray-pods-to-ray-pods",
            namespace,
            {
                "podSelector": RAY_POD_SELECTOR,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": RAY_POD_SELECTOR}]}],  # same namespace only
            },
        ),
        # The KubeRay operator deploys and watches the Serve apps through the head's dashboard API
        # (ray-operator v1.7.0 utils/dashboardclient, the head service's `dashboard` port), with Ray's token
        # (ray_llm_eks/domain/security/ray_auth.py): its own pods only, not every pod of its namespace.
        _policy(
            "dashboard-from-kuberay-operator",
            namespace,
            {
                "podSelector": HEAD_POD_SELECTOR,
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": namespace_selector(operator_namespace),
                                "podSelector": OPERATOR_POD_SELECTOR,
                            }
                        ],
                        "ports": [{"protocol": "TCP", "port": HEAD_PORTS["dashboard"]}],
                    }
                ],
            },
            {OPERATOR_NAMESPACE_ANNOTATION: operator_namespace},
        ),
    ]
    if obs is not None and obs.enabled:
        # Prometheus scrapes every Ray pod on its metrics ports (the PodMonitors:
        # ray_llm_eks/domain/telemetry/observability.py).
        policies.append(
            _policy(
                "metrics-from-prometheus",
                namespace,
                {
                    "podSelector": RAY_POD_SELECTOR,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"namespaceSelector": namespace_selector(obs.prometheus_namespace)}],
                            "ports": [{"protocol": "TCP", "port": p} for p in observability.metrics_ports(obs)],
                        }
                    ],
                },
                {PROMETHEUS_NAMESPACE_ANNOTATION: obs.prometheus_namespace},
            )
        )
    if hardening.internal_endpoint and hardening.load_balancer_subnets:
        # The internal NLB (IP targets, client IP not preserved: ray_llm_eks/components/load_balancer.py) reaches
        # the pods, health checks included, from its own addresses in its subnets, the public ones,
        # where no node and so no pod lives (ray_llm_eks/domain/platform/subnets.py). Not the VPC CIDR: every pod has an
        # address there, which would open the serve port to every namespace.
        policies.append(
            _policy(
                "serve-port-from-load-balancer",
                namespace,
                {
                    "podSelector": RAY_POD_SELECTOR,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"ipBlock": {"cidr": cidr}} for _, cidr in hardening.load_balancer_subnets],
                            "ports": [{"protocol": "TCP", "port": SERVE_PORT}],
                        }
                    ],
                },
            )
        )
    if hardening.serve_client_namespaces:
        selector = namespace_selector(*hardening.serve_client_namespaces)
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


def monitoring_policies(obs: ObservabilitySettings, ray_namespace: str) -> list[dict]:
    """The monitoring namespace's (embedded, amp): Prometheus, Grafana and Alertmanager take ingress
    only from pods of that namespace (Grafana queries Prometheus, Prometheus scrapes all three and
    sends alerts, Alertmanager replicas gossip) and, for Prometheus and Grafana with embedded, from the
    Ray head, which queries both (head_env). Alertmanager's API, which silences alerts without
    authentication, is reachable from no other namespace. The operator, kube-state-metrics and the
    exporters keep open ingress: the API server calls the operator's webhook from the control plane's
    addresses, and node-exporter's host network is out of a policy's reach."""
    if not obs.in_cluster_stack:
        return []
    namespace = observability.NAMESPACE
    own = {"podSelector": {}}  # this namespace's pods

    def admitted(name: str, pods: dict, port: int | None) -> dict:
        ingress = [{"from": [own]}]
        if port is not None:
            head = {"namespaceSelector": namespace_selector(ray_namespace), "podSelector": HEAD_POD_SELECTOR}
            ingress.append({"from": [head], "ports": [{"protocol": "TCP", "port": port}]})
        return _policy(name, namespace, {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress})

    ray_port = observability.PROMETHEUS_PORT if obs.grafana else None  # only embedded's head queries it
    policies = [admitted("prometheus-from-grafana-and-ray", observability.PROMETHEUS_POD_SELECTOR, ray_port)]
    if obs.grafana:
        policies += [
            admitted(
                "grafana-from-monitoring-and-ray",
                observability.GRAFANA_POD_SELECTOR,
                observability.GRAFANA_CONTAINER_PORT,
            ),
            admitted("alertmanager-from-monitoring", observability.ALERTMANAGER_POD_SELECTOR, None),
        ]
    return policies
