"""ClusterAutoscaler: grows a GPU pool when worker pods stay Pending and shrinks it when a node has
run nothing for a while, on the system node, with AWS access through EKS Pod Identity."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from components.helm import helm_release
from domain.placement import SYSTEM_LABELS
from domain.settings import ChartPin
from domain.sizing import CLUSTER_AUTOSCALER_REQUESTS
from domain.versions import CLUSTER_AUTOSCALER_IMAGE_TAGS

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
# The trust principal of EKS Pod Identity; it needs both actions (EKS user guide, pod-id-role).
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def autoscaler_policy(cluster_name: str) -> str:
    """The Cluster Autoscaler README's "full features" policy (cloudprovider/aws/README.md, chart
    9.59.0), with the two writing actions limited to ASGs EKS tagged as this cluster's own (EKS tags
    a managed node group's ASG k8s.io/cluster-autoscaler/<cluster>=owned)."""
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
                    "Condition": {
                        "StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
                    },
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
            # The prefill and decode pools look alike (same type, labels but `role`): never balance them.
            "balance-similar-node-groups": "false",
            # A GPU node joins in minutes, then pulls the image before the pod runs: the default 15 min
            # provision timeout covers the join only (README: scaling end to end).
            "max-node-provision-time": "15m0s",
        },
    }


class ClusterAutoscaler(pulumi.ComponentResource):
    """Installed only when a pool's minSize and maxSize differ. Its IAM role reaches the pod through
    an EKS Pod Identity association (the agent is an EKS add-on), not through node credentials."""

    def __init__(
        self,
        name: str,
        pin: ChartPin,
        cluster_name: str,
        region: str,
        kubernetes_version: str,
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:cluster_autoscaler:ClusterAutoscaler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        agent = aws.eks.Addon(
            f"{name}-pod-identity-agent", cluster_name=cluster_name, addon_name="eks-pod-identity-agent", opts=child
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                            "Action": ["sts:AssumeRole", "sts:TagSession"],
                        }
                    ],
                }
            ),
            opts=child,
        )
        policy = aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=autoscaler_policy(cluster_name), opts=child)
        association = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=role.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        self.release = helm_release(
            "cluster-autoscaler",
            pin,
            NAMESPACE,
            chart_values(cluster_name, region, kubernetes_version),
            # Credentials exist before the pod asks for them; on destroy the pod goes first.
            pulumi.ResourceOptions(parent=self, depends_on=[agent, association]),
        )
        self.register_outputs({"roleArn": role.arn})
