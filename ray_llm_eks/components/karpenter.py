"""Karpenter: makes the GPU nodes for the Ray worker pods that wait for them, one NodePool and one
EC2NodeClass per GPU pool (ray_llm_eks/domain/render/karpenter.py), in place of the GPU managed node groups and the
Cluster Autoscaler. Its controller runs on the system nodes with AWS access through EKS Pod
Identity; EC2's interruption notices reach it through an SQS queue fed by EventBridge rules.

What it builds follows Karpenter's own getting-started CloudFormation (aws/karpenter-provider-aws
v1.14.1 website/content/en/docs/getting-started/getting-started-with-karpenter/cloudformation.yaml):
the controller's policies, the queue and its policy, the rules; its node role is ours (NodeRole).

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.cluster import NodeRole
from ray_llm_eks.components.observability import custom_object
from ray_llm_eks.components.pod_identity import ControllerRelease, pod_identity_role, release_with_role
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.platform.field_checks import check_chart_version, check_cluster_name, check_region
from ray_llm_eks.domain.platform.placement import SYSTEM_LABELS
from ray_llm_eks.domain.platform.sizing import KARPENTER_REQUESTS
from ray_llm_eks.domain.platform.versions import KARPENTER_CHART, ChartPin

NAMESPACE = "kube-system"  # the getting-started guide's KARPENTER_NAMESPACE
SERVICE_ACCOUNT = "karpenter"  # the chart's service account (its fullname)
ARGS = "KarpenterArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
# The node classes' placement groups: a cluster group keeps a pool's EFA traffic on one network spine.
PLACEMENT_STRATEGY = "cluster"
# The events the controller acts on before EC2 does (the CloudFormation's five rules at v1.14.1:
# ScheduledChange, SpotInterruption, Rebalance, InstanceStateChange, CapacityReservationInterruption).
INTERRUPTION_EVENTS = {
    "scheduled-change": ("aws.health", "AWS Health Event"),
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "instance-state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}
QUEUE_RETENTION_SECONDS = 300  # the CloudFormation's MessageRetentionPeriod: a notice older than this is moot


@dataclass(frozen=True)
class KarpenterArgs:
    """The chart, the cluster it provisions for, and the objects it provisions from."""

    cluster_name: str
    """The EKS cluster's name (config key clusterName): the controller's scope and its queue's name."""
    region: str
    """The cluster's AWS region."""
    node_pools: Sequence[Mapping[str, Any]]
    """NodePool manifests, one per GPU pool (ray_llm_eks/domain/render/karpenter.py node_pool)."""
    node_classes: Sequence[Mapping[str, Any]]
    """EC2NodeClass manifests (ray_llm_eks/domain/render/karpenter.py ec2_node_class) without spec.role: this
    component's."""
    placement_groups: Sequence[str] = ()
    """Names of the cluster placement groups the node classes select (created here)."""
    replicas: int | None = 2
    """Controller replicas (the chart's default 2, one per system node: its pods repel each other)."""
    chart_version: str | None = default("karpenterVersion")
    """The karpenter chart's exact version (config key karpenterVersion)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_cluster_name("cluster_name", self.cluster_name, ARGS)
        check_region("region", self.region, botocore_facts.load(), ARGS)
        check_chart_version("chart_version", self.chart_version, KARPENTER_CHART[1], default("karpenterVersion"), ARGS)


def controller_policy(cluster_name: str, partition: str, region: str, node_role_arn: str, queue_arn: str) -> str:
    """The CloudFormation's six controller policies in one document (NodeLifecycle, IAMIntegration,
    EKSIntegration, Interruption, ZonalShift, ResourceDiscovery), each statement scoped as there. The
    account in ARNs is `*`: a role's policy grants nothing in another account anyway."""
    ec2 = f"arn:{partition}:ec2:{region}"
    profiles = f"arn:{partition}:iam::*:instance-profile/*"
    cluster_arn = f"arn:{partition}:eks:{region}:*:cluster/{cluster_name}"
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    nodepool_tagged = {"StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}
    launched = [
        f"{ec2}:*:{kind}/*"
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    ]
    run = ["ec2:RunInstances", "ec2:CreateFleet"]
    region_tag = {"aws:ResourceTag/topology.kubernetes.io/region": region}
    statements = [
        {
            "Sid": "AllowScopedEC2InstanceAccessActions",
            "Resource": [f"{ec2}::image/*", f"{ec2}::snapshot/*"]
            + [f"{ec2}:*:{k}/*" for k in ("security-group", "subnet", "capacity-reservation", "placement-group")],
            "Action": run,
        },
        {
            "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
            "Resource": f"{ec2}:*:launch-template/*",
            "Action": run,
            "Condition": {"StringEquals": owned, **nodepool_tagged},
        },
        {
            "Sid": "AllowScopedEC2InstanceActionsWithTags",
            "Resource": launched,
            "Action": [*run, "ec2:CreateLaunchTemplate"],
            "Condition": {"StringEquals": request_owned, "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
        },
        {
            "Sid": "AllowScopedResourceCreationTagging",
            "Resource": launched,
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": {
                    **request_owned,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceTagging",
            "Resource": f"{ec2}:*:instance/*",
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": owned,
                **nodepool_tagged,
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        },
        {
            "Sid": "AllowScopedDeletion",
            "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
            "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            "Condition": {"StringEquals": owned, **nodepool_tagged},
        },
        {
            "Sid": "AllowPassingInstanceRole",
            "Resource": node_role_arn,
            "Action": "iam:PassRole",
            "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
        },
        {
            "Sid": "AllowScopedInstanceProfileCreationActions",
            "Resource": profiles,
            "Action": ["iam:CreateInstanceProfile"],
            "Condition": {
                "StringEquals": {**request_owned, "aws:RequestTag/topology.kubernetes.io/region": region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileTagActions",
            "Resource": profiles,
            "Action": ["iam:TagInstanceProfile"],
            "Condition": {
                "StringEquals": {
                    **owned,
                    **region_tag,
                    **request_owned,
                    "aws:RequestTag/topology.kubernetes.io/region": region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileActions",
            "Resource": profiles,
            "Action": [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            "Condition": {
                "StringEquals": {**owned, **region_tag},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        },
        {"Sid": "AllowAPIServerEndpointDiscovery", "Resource": cluster_arn, "Action": "eks:DescribeCluster"},
        {
            "Sid": "AllowInterruptionQueueActions",
            "Resource": queue_arn,
            "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        },
        {
            "Sid": "AllowZonalShiftStatusReadOnly",
            "Resource": "*",
            "Action": ["arc-zonal-shift:GetManagedResource"],
            "Condition": {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn}},
        },
        {
            "Sid": "AllowRegionalReadActions",
            "Resource": "*",
            "Action": [
                f"ec2:{action}"
                for action in (
                    "DescribeCapacityReservations",
                    "DescribeImages",
                    "DescribeInstances",
                    "DescribeInstanceStatus",
                    "DescribeInstanceTypeOfferings",
                    "DescribeInstanceTypes",
                    "DescribeLaunchTemplates",
                    "DescribePlacementGroups",
                    "DescribeSecurityGroups",
                    "DescribeSpotPriceHistory",
                    "DescribeSubnets",
                )
            ],
            "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
        },
        {
            "Sid": "AllowSSMReadActions",
            "Resource": f"arn:{partition}:ssm:{region}::parameter/aws/service/*",
            "Action": "ssm:GetParameter",
        },
        {"Sid": "AllowPricingReadActions", "Resource": "*", "Action": "pricing:GetProducts"},
        {"Sid": "AllowUnscopedInstanceProfileListAction", "Resource": "*", "Action": "iam:ListInstanceProfiles"},
        {"Sid": "AllowInstanceProfileReadActions", "Resource": profiles, "Action": "iam:GetInstanceProfile"},
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", **s} for s in statements]})


def queue_policy(queue_arn: str) -> str:
    """EventBridge (and SQS) may send to the queue on this account's behalf only (aws:SourceAccount, the account
    in the queue's ARN: a rule of another account cannot feed it); nothing may use it over plain HTTP (the
    CloudFormation's KarpenterInterruptionQueuePolicy)."""
    account = queue_arn.split(":")[4]  # arn:<partition>:sqs:<region>:<account>:<name>
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Id": "EC2InterruptionPolicy",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {"StringEquals": {"aws:SourceAccount": account}},
                },
                {
                    "Sid": "DenyHTTP",
                    "Effect": "Deny",
                    "Action": "sqs:*",
                    "Resource": queue_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    "Principal": "*",
                },
            ],
        }
    )


def chart_values(cluster_name: str, queue_name: str, replicas: int) -> dict:
    return {
        "replicas": replicas,
        "serviceAccount": {"name": SERVICE_ACCOUNT},
        "settings": {"clusterName": cluster_name, "interruptionQueue": queue_name},
        "nodeSelector": dict(SYSTEM_LABELS),
        "controller": {
            "resources": {"requests": KARPENTER_REQUESTS.as_k8s(), "limits": KARPENTER_REQUESTS.as_k8s()},
        },
    }


class Karpenter(pulumi.ComponentResource):
    """Installed with nodeProvisioning: karpenter. Create order: roles, queue and rules, then the
    release, then the node classes and node pools. Destroy runs it backwards: the NodePools and
    EC2NodeClasses go first, while the controller still runs to drain and terminate their nodes (their
    finalizers wait for that), then the release, then its role and queue."""

    TYPE = "ray-llm-eks:karpenter:Karpenter"

    def __init__(
        self,
        name: str,
        args: KarpenterArgs,
        cluster: eks.Cluster,
        agent: pulumi.Resource,
        opts: pulumi.ResourceOptions,
    ):
        """`cluster`: the EKS cluster (Cluster.eks_cluster in ray_llm_eks/components/cluster.py), for the nodes'
        access entry; `agent`: its EKS Pod Identity agent (ray_llm_eks/components/pod_identity.py), the controller
        role's way to the pod."""
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = botocore_facts.load().region_partition(args.region)

        # Karpenter's nodes join with their own role: EKS makes access entries only for node groups' roles.
        self.node_role = NodeRole(f"{name}-node-role", args.region, opts=child)
        self.access_entry = aws.eks.AccessEntry(
            f"{name}-nodes",
            cluster_name=cluster.eks_cluster.name,
            principal_arn=self.node_role.role.arn,
            type="EC2_LINUX",
            opts=child,
        )
        self.queue = aws.sqs.Queue(
            f"{name}-interruption",
            name=args.cluster_name,  # the chart's settings.interruptionQueue names it
            message_retention_seconds=QUEUE_RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        queue_access = aws.sqs.QueuePolicy(
            f"{name}-interruption", queue_url=self.queue.url, policy=self.queue.arn.apply(queue_policy), opts=child
        )
        rules = []
        for event, (source, detail_type) in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{event}",
                event_pattern=json.dumps({"source": [source], "detail-type": [detail_type]}),
                opts=child,
            )
            rules.append(
                aws.cloudwatch.EventTarget(
                    f"{name}-{event}",
                    rule=rule.name,
                    target_id="KarpenterInterruptionQueueTarget",
                    arn=self.queue.arn,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[queue_access]),
                )
            )

        role = pod_identity_role(f"{name}-role", self, args.cluster_name, (NAMESPACE, SERVICE_ACCOUNT))
        policy = aws.iam.RolePolicy(
            f"{name}-policy",
            role=role.id,
            policy=pulumi.Output.all(self.node_role.role.arn, self.queue.arn).apply(
                lambda arns: controller_policy(args.cluster_name, partition, args.region, arns[0], arns[1])
            ),
            opts=child,
        )
        self.release = release_with_role(
            name,
            ControllerRelease(
                "karpenter",
                ChartPin(*KARPENTER_CHART, args.chart_version),
                chart_values(args.cluster_name, args.cluster_name, args.replicas),
                (NAMESPACE, SERVICE_ACCOUNT),
            ),
            args.cluster_name,
            role,
            [policy, *rules],
            agent,
            self,
        )

        groups = [
            aws.ec2.PlacementGroup(f"{name}-{group}", name=group, strategy=PLACEMENT_STRATEGY, opts=child)
            for group in args.placement_groups
        ]
        # After the release (its CRDs and webhooks) and everything the nodes need to join; on destroy
        # they go before all of these, so the controller drains and terminates their nodes first.
        joined = pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.access_entry, *groups])
        self.node_classes = [
            custom_object(
                f"{name}-{m['metadata']['name']}-class",
                {**m, "spec": {**m["spec"], "role": self.node_role.role.name}},
                joined,
            )
            for m in args.node_classes
        ]
        self.node_pools = [
            custom_object(
                f"{name}-{m['metadata']['name']}-pool",
                m,
                pulumi.ResourceOptions(parent=self, depends_on=[self.release, *self.node_classes]),
            )
            for m in args.node_pools
        ]
        self.register_outputs({"nodeRoleArn": self.node_role.role.arn, "queueUrl": self.queue.url})
