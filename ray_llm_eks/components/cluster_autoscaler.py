"""ClusterAutoscaler: grows a GPU pool when worker pods stay Pending and shrinks it when a node has
run nothing for a while, on the system node, with AWS access through EKS Pod Identity.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.pod_identity import ControllerRelease, pod_identity_role, release_with_role
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.platform.field_checks import (
    check_chart_version,
    check_cluster_name,
    check_kubernetes_version,
    check_region,
)
from ray_llm_eks.domain.platform.placement import SYSTEM_LABELS
from ray_llm_eks.domain.platform.sizing import CLUSTER_AUTOSCALER_REQUESTS
from ray_llm_eks.domain.platform.versions import CLUSTER_AUTOSCALER_CHART, CLUSTER_AUTOSCALER_IMAGE_TAGS, ChartPin

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
ARGS = "ClusterAutoscalerArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
# The trust principal of EKS Pod Identity; it needs both actions (EKS user guide, pod-id-role).


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    """The autoscaler's chart and the cluster it scales; its image follows the cluster's Kubernetes version."""

    cluster_name: str
    """The EKS cluster's name: the node groups' ASGs it discovers and resizes carry its tag (config key clusterName)."""
    region: str
    """The cluster's AWS region."""
    kubernetes_version: str | None = default("kubernetesVersion")
    """The cluster's EKS version (config key kubernetesVersion): the autoscaler image of the same minor."""
    chart_version: str | None = default("clusterAutoscalerVersion")
    """The cluster-autoscaler chart's exact version (config key clusterAutoscalerVersion)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, ARGS)
        check_region("region", self.region, botocore_facts.load(), ARGS)
        check_kubernetes_version("kubernetes_version", self.kubernetes_version, ARGS)
        chart = CLUSTER_AUTOSCALER_CHART[1]
        check_chart_version("chart_version", self.chart_version, chart, default("clusterAutoscalerVersion"), ARGS)


def autoscaler_policy(cluster_name: str) -> str:
    """The Cluster Autoscaler README's "full features" policy (cloudprovider/aws/README.md, chart
    9.59.0), with the two writing actions limited to ASGs carrying this cluster's discovery tag key.
    EKS tags a managed node group's resources for the autoscaler (EKS user guide, managed node
    groups); the autoscaler discovers by the key alone, so the condition asks for the key, whatever
    its value ("owned" in the dumps we found, not in a primary source)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                        "eks:DescribeNodegroup",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {"Null": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "false"}},
                },
            ],
        }
    )


def chart_values(cluster_name: str, region: str, kubernetes_version: str) -> dict:
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        # Auto-discovery: the ASGs EKS tags k8s.io/cluster-autoscaler/enabled and .../<cluster> (chart default tags).
        "autoDiscovery": {"clusterName": cluster_name},
        "fullnameOverride": "cluster-autoscaler",
        "image": {"tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "nodeSelector": dict(SYSTEM_LABELS),
        "resources": {
            "requests": CLUSTER_AUTOSCALER_REQUESTS.as_k8s(),
            "limits": CLUSTER_AUTOSCALER_REQUESTS.as_k8s(),
        },
        "extraArgs": {
            # Ray workers mount an emptyDir (/dev/shm): with the default (true) a GPU node would never
            # be removed. Workers still block removal while they run (safe-to-evict: false).
            "skip-nodes-with-local-storage": "false",
            # Prefer the pool that wastes least of a node (matters once one role has pools of two types).
            "expander": "least-waste",
            # The prefill and decode pools look alike (same type, labels but the pool's name): never balance them.
            "balance-similar-node-groups": "false",
            # A GPU node joins in minutes, then pulls the image before the pod runs: the default 15 min
            # provision timeout covers the join only (docs/scaling.md).
            "max-node-provision-time": "15m0s",
        },
    }


class ClusterAutoscaler(pulumi.ComponentResource):
    """Installed only when a pool's minSize and maxSize differ. Its IAM role reaches the pod through
    an EKS Pod Identity association (the agent is an EKS add-on), not through node credentials."""

    TYPE = "ray-llm-eks:cluster_autoscaler:ClusterAutoscaler"  # the shipped program's resources keep their URNs

    def __init__(
        self,
        name: str,
        args: ClusterAutoscalerArgs,
        opts: pulumi.ResourceOptions | None = None,
        agent: pulumi.Resource | None = None,
    ):
        """`agent`: the cluster's EKS Pod Identity agent (ray_llm_eks/components/pod_identity.py), the role's way to the
        pod, which the release waits for; a caller of the hosted component, whose cluster runs the agent add-on, says so
        with dependsOn."""
        super().__init__(self.TYPE, name, None, opts)
        cluster_name = args.cluster_name
        pin = ChartPin(*CLUSTER_AUTOSCALER_CHART, args.chart_version)
        child = pulumi.ResourceOptions(parent=self)
        role = pod_identity_role(f"{name}-role", self, args.cluster_name, (NAMESPACE, SERVICE_ACCOUNT))
        policy = aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=autoscaler_policy(cluster_name), opts=child)
        self.release = release_with_role(
            name,
            ControllerRelease(
                "cluster-autoscaler",
                pin,
                chart_values(cluster_name, args.region, args.kubernetes_version),
                (NAMESPACE, SERVICE_ACCOUNT),
            ),
            cluster_name,
            role,
            [policy],
            agent,
            self,
        )
        self.register_outputs({"roleArn": role.arn})
