"""Cluster: the EKS control plane, its log group, the node role, the system node group and the one
Kubernetes provider every in-cluster resource uses."""

from __future__ import annotations

import hashlib
import json
import re

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from adapters import botocore_facts
from components.network import Network
from components.node_metadata import hop_limit_one
from domain.facts import ENVIRONMENT_TAG
from domain.hardening import HardeningSettings
from domain.placement import SYSTEM_LABELS
from domain.settings import ClusterSettings, NodePoolSettings

# Managed policies a node needs: join the cluster (and the Pod Identity agent's eks-auth call), run the VPC
# CNI, pull images from ECR (PullOnly: the EKS user guide's node role, create-node-role; ReadOnly also lists
# and describes every repository).
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
)
# Reachable through SSM Session Manager instead of SSH, and nothing else of Systems Manager: the SSM Agent's
# Session Manager channels (Systems Manager user guide, a custom instance profile for Session Manager; the same
# actions as the managed AWSCloud9SSMInstanceProfile). AmazonSSMManagedInstanceCore would add ssm:GetParameter(s)
# on every parameter, documents, inventory and Run Command.
SESSION_MANAGER_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)


def scaling(nodes: NodePoolSettings) -> aws.eks.NodeGroupScalingConfigArgs:
    return aws.eks.NodeGroupScalingConfigArgs(
        min_size=nodes.min_size, desired_size=nodes.desired_size, max_size=nodes.max_size
    )


class NodeRole(pulumi.ComponentResource):
    """The IAM role every node group uses, with the managed policies nodes need."""

    def __init__(self, name: str, region: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:cluster:NodeRole", name, None, opts)
        partition = botocore_facts.load().region_partition(region)
        self.role = aws.iam.Role(
            name,
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": botocore_facts.load().ec2_service_principal(region)},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-{policy}",
                role=self.role.name,
                policy_arn=f"arn:{partition}:iam::aws:policy/{policy}",
                opts=pulumi.ResourceOptions(parent=self),
            )
            for policy in NODE_POLICIES
        ]
        self.session_manager = aws.iam.RolePolicy(
            f"{name}-session-manager",
            role=self.role.name,
            policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": list(SESSION_MANAGER_ACTIONS), "Resource": "*"}],
                }
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"roleArn": self.role.arn})


def admin_access_entries(principal_arns: tuple[str, ...], partition: str) -> dict[str, eks.AccessEntryArgs]:
    """Cluster-admin access entries for the configured principals (teammates, CI): without them only
    the identity that created the cluster can reach the Kubernetes API."""
    policy = f"arn:{partition}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    return {
        access_entry_name(arn): eks.AccessEntryArgs(
            principal_arn=arn,
            access_policies={
                "cluster-admin": eks.AccessPolicyAssociationArgs(
                    policy_arn=policy, access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster")
                )
            },
        )
        for arn in principal_arns
    }


def access_entry_name(principal_arn: str) -> str:
    """Stable per principal (not per list position), so removing one admin leaves the others alone."""
    name = re.sub(r"[^A-Za-z0-9-]+", "-", principal_arn.rsplit("/", 1)[-1])[:40]
    return f"admin-{name}-{hashlib.sha256(principal_arn.encode()).hexdigest()[:8]}"


class Cluster(pulumi.ComponentResource):
    """EKS with API authentication, private nodes, a restricted public endpoint, control-plane
    logging into a log group we own, secrets encrypted with our KMS key, and the system nodes."""

    def __init__(
        self,
        name: str,
        settings: ClusterSettings,
        network: Network,
        region: str,
        opts: pulumi.ResourceOptions | None = None,
        hardening: HardeningSettings | None = None,
        pod_security_groups: bool = False,
    ):
        super().__init__("ray-llm-eks:cluster:Cluster", name, None, opts)
        hardening = hardening or HardeningSettings()
        child = pulumi.ResourceOptions(parent=self)
        self.name = settings.name
        partition = botocore_facts.load().region_partition(region)

        # EKS creates /aws/eks/<name>/cluster itself when logging is on and never deletes it;
        # declared here first, it has a retention period and `destroy` removes it.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{settings.name}/cluster",
            retention_in_days=settings.log_retention_days,
            opts=child,
        )
        # Envelope encryption of Kubernetes Secrets (the Hugging Face token lives in one).
        self.secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets encryption for {settings.name}",
            enable_key_rotation=True,
            deletion_window_in_days=7,
            opts=child,
        )
        self.node_role = NodeRole(f"{name}-node-role", region, opts=child)

        self.eks = eks.Cluster(
            name,
            name=settings.name,
            version=settings.kubernetes_version,
            vpc_id=network.vpc.id,
            private_subnet_ids=network.private_subnet_ids,
            public_subnet_ids=network.public_subnet_ids,
            node_associate_public_ip_address=False,
            authentication_mode=eks.AuthenticationMode.API,
            skip_default_node_group=True,
            # No instance_roles: pulumi-eks refuses them with authentication mode API, and EKS creates
            # the access entries of managed node groups itself.
            access_entries=admin_access_entries(settings.admin_principal_arns, partition),
            endpoint_private_access=True,
            endpoint_public_access=True,
            public_access_cidrs=list(settings.public_access_cidrs),
            kubernetes_service_ip_address_range=settings.service_cidr,
            enabled_cluster_log_types=list(settings.log_types),
            encryption_config_key_arn=self.secrets_key.arn,
            create_oidc_provider=True,
            # The VPC CNI add-on's network policy agent (its configurationValues enableNetworkPolicy):
            # without it NetworkPolicy objects are accepted and ignored.
            # Security groups for pods (the GCS store admits the Ray head's group only, components/gcs_store.py):
            # the CNI's ENABLE_POD_ENI, and TCP early demux off so the kubelet's TCP/HTTP probes still reach
            # a pod on a branch interface (pulumi-eks VpcCniOptions, EKS user guide security-groups-for-pods).
            vpc_cni_options=eks.VpcCniOptionsArgs(
                enable_network_policy=hardening.network_policies,
                enable_pod_eni=pod_security_groups or None,
                disable_tcp_early_demux=pod_security_groups or None,
            ),
            # The policy pack reads the environment here (policy/rules.py, api-endpoint-restricted).
            cluster_tags={ENVIRONMENT_TAG: hardening.environment},
            # The whole network (NAT routes included) first: nodes need egress to join and pull
            # images; on destroy the cluster goes before the routes it relies on.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[network, self.log_group, self.node_role]),
        )

        if pod_security_groups:
            # The VPC resource controller (EKS's, in the control plane) attaches the branch interfaces with
            # the cluster role: AWS's managed policy for it (EKS user guide, security-groups-for-pods).
            aws.iam.RolePolicyAttachment(
                f"{name}-vpc-resource-controller",
                role=self.eks.eks_cluster.role_arn.apply(lambda arn: arn.rsplit("/", 1)[-1]),
                policy_arn=f"arn:{partition}:iam::aws:policy/AmazonEKSVPCResourceController",
                opts=child,
            )
        self.cluster_security_group_id = self.eks.cluster_security_group_id

        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks,
            node_role=self.node_role.role,
            # In the GPU nodes' zone: EBS volumes are zonal (Prometheus's, domain/observability.py), and a
            # node replaced into another zone would strand the pod that mounts one; the Ray head also sits
            # next to its workers. The GPU zone holds every GPU node anyway (EFA), so a second zone would
            # keep nothing serving.
            subnet_ids=[network.gpu_subnet_id],
            instance_types=[settings.system_nodes.instance_type],
            scaling_config=scaling(settings.system_nodes),
            disk_size=settings.system_nodes.disk_size_gib,
            ami_type="AL2023_x86_64_STANDARD",
            labels=SYSTEM_LABELS,
            enable_imd_sv2=True,  # also makes pulumi-eks build the launch template the transform sets
            opts=pulumi.ResourceOptions(parent=self, transforms=[hop_limit_one]),
        )

        # Built once from the kubeconfig; nothing that changes is interpolated into it, since a
        # replaced provider replaces every Kubernetes object on it.
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.eks.kubeconfig_json, opts=pulumi.ResourceOptions(parent=self)
        )
        self.kubeconfig = pulumi.Output.secret(self.eks.kubeconfig_json)
        self.register_outputs({"clusterName": settings.name, "kubeconfig": self.kubeconfig})
