"""Cluster: the EKS control plane, its log group, the node role, the system node group and the one
Kubernetes provider every in-cluster resource uses.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults, present
from ray_llm_eks.components.node_metadata import hop_limit_one
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.facts import ENVIRONMENT_TAG
from ray_llm_eks.domain.platform import sizing
from ray_llm_eks.domain.platform.field_checks import (
    check_cluster_name,
    check_count,
    check_environment,
    check_instance_type,
    check_kubernetes_version,
    check_log_retention,
    check_log_types,
    check_node_group,
    check_principal_arns,
    check_public_access_cidrs,
    check_region,
    check_service_cidr,
    check_subnet_ids,
    check_system_disk,
    node_sizes,
)
from ray_llm_eks.domain.platform.placement import SYSTEM_LABELS

ARGS = "ClusterArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
NODE_GROUP_ARGS = "NodeGroupArgs"

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


@dataclass(frozen=True)
class NodeGroupArgs:
    """One managed node group's instance type, size bounds and root volume."""

    instance_type: str
    """The EC2 instance type of every node (config key systemNodes.instanceType, gpuPools.<name>.instanceType)."""
    min_size: int | None = None
    """Fewest nodes (minSize); none: desired_size."""
    desired_size: int | None = None
    """Nodes to start with (desiredSize); none: min_size, at least 1."""
    max_size: int | None = None
    """Most nodes, at least 1 (maxSize); none: desired_size."""
    disk_size_gib: int | None = None
    """The gp3 root volume, 20 to 16384 GiB (diskSizeGiB); none: the group's default (the system or the GPU nodes')."""

    def __post_init__(self) -> None:
        for name in ("min_size", "desired_size", "max_size"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name), NODE_GROUP_ARGS)
        low, desired, high = node_sizes(self.min_size, self.desired_size, self.max_size)
        object.__setattr__(self, "min_size", low)
        object.__setattr__(self, "desired_size", desired)
        object.__setattr__(self, "max_size", high)
        check_instance_type("instance_type", self.instance_type, botocore_facts.load(), NODE_GROUP_ARGS)
        sizes = {"min_size": low, "desired_size": desired, "max_size": high}
        disk = None if self.disk_size_gib is None else ("disk_size_gib", self.disk_size_gib)
        check_node_group("desired_size", sizes, disk, NODE_GROUP_ARGS)

    def with_disk_default(self, gib: int) -> "NodeGroupArgs":
        """These nodes, their root volume `gib` where the caller left it out (each group's default differs)."""
        return self if self.disk_size_gib is not None else replace(self, disk_size_gib=gib)


def scaling(nodes: NodeGroupArgs) -> aws.eks.NodeGroupScalingConfigArgs:
    return aws.eks.NodeGroupScalingConfigArgs(
        min_size=nodes.min_size, desired_size=nodes.desired_size, max_size=nodes.max_size
    )


def auto_mode_options() -> dict:
    """eks.Cluster's inputs for EKS Auto Mode beside our system node group (pulumi/pulumi-eks
    nodejs/eks/cluster/cluster.ts, newest snapshot 7bf0c1b, whose inputs equal the Python SDK 4.4.0's):
    `autoMode.enabled` makes pulumi-eks create Auto Mode's node role (createNodeRole defaults to true) and
    pass it as computeConfig.nodeRoleArn, add Auto Mode's policies to the cluster role, and skip the VPC CNI
    and kube-proxy add-ons, which our managed system nodes still need (Auto Mode's networking runs on its
    own nodes only): both are asked for again. Built-in pools: `system` alone (its nodes take only pods
    that tolerate CriticalAddonsOnly), not `general-purpose`: the GPU pods go to our NodePools, everything
    else to the system node group."""
    return {
        "auto_mode": eks.AutoModeOptionsArgs(
            enabled=True, compute_config=eks.ClusterComputeConfigArgs(node_pools=[AUTO_MODE_BUILT_IN_POOL])
        ),
        "use_default_vpc_cni": False,  # pulumi-eks: the add-on is created unless this is true (or Auto Mode)
        "kube_proxy_addon_options": eks.KubeProxyAddonOptionsArgs(enabled=True),
    }


AUTO_MODE_BUILT_IN_POOL = "system"


def pulumi_eks_addon_options(versions: Mapping[str, str], auto_mode: bool) -> dict:
    """eks.Cluster's kube-proxy and CoreDNS add-on inputs: at the kept version where the stack has one (pulumi-eks
    takes the newest for the cluster's version otherwise, cluster.ts getAddonVersionOutput mostRecent); kube-proxy
    asked for again under Auto Mode (auto_mode_options)."""
    options = {}
    if "kube-proxy" in versions or auto_mode:
        options["kube_proxy_addon_options"] = eks.KubeProxyAddonOptionsArgs(
            enabled=True, version=versions.get("kube-proxy")
        )
    if "coredns" in versions:
        options["coredns_addon_options"] = eks.CoreDnsAddonOptionsArgs(version=versions["coredns"])
    return options


@dataclass(frozen=True)
class ClusterArgs:
    """The EKS cluster: its name, version, who administers it, its API endpoint, logs and system nodes."""

    name: str
    """The EKS cluster's name (config key clusterName)."""
    region: str
    """The cluster's AWS region: its partition names the policies and the node role's trust."""
    vpc_id: pulumi.Input[str]
    """The VPC the cluster goes in (Network's vpc_id)."""
    private_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    """The VPC's private subnets, one per zone: the control plane's and the nodes' (Network's private_subnet_ids)."""
    public_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    """The VPC's public subnets, one per zone (Network's public_subnet_ids)."""
    system_subnet_id: pulumi.Input[str]
    """The private subnet of the system node group, in the GPU nodes' zone (Network's gpu_subnet_id)."""
    kubernetes_version: str | None = default("kubernetesVersion")
    """The EKS Kubernetes version (config key kubernetesVersion)."""
    admin_principal_arns: Sequence[str] | None = ()
    """IAM roles or users given cluster-admin access entries besides the deployer (config key clusterAdmins)."""
    public_access_cidrs: Sequence[str] | None = tuple(default("endpointPublicAccessCidrs"))
    """Who may reach the public API endpoint, at least one CIDR (config key endpointPublicAccessCidrs)."""
    service_cidr: str | None = default("serviceCidr")
    """The Kubernetes service range, private, /12 to /24, apart from the VPC's (config key serviceCidr)."""
    log_types: Sequence[str] | None = tuple(default("clusterLogTypes"))
    """The control plane's log types sent to CloudWatch (config key clusterLogTypes)."""
    log_retention_days: int | None = default("clusterLogRetentionDays")
    """Retention of the control plane's log group, a value CloudWatch accepts (config key clusterLogRetentionDays)."""
    system_nodes: NodeGroupArgs | None = None
    """The system node group (the Ray head, CoreDNS, the operators); none: the systemNodes key's default."""
    environment: str | None = default("environment")
    """dev, staging or production: the cluster's environment tag, read by the policy pack (config key environment)."""
    network_policies: bool | None = default("networkPolicies")
    """The VPC CNI's network policy agent enforces NetworkPolicies (config key networkPolicies)."""
    pod_security_groups: bool | None = False
    """Security groups for pods (the GCS store admits the Ray head's group only,
    ray_llm_eks/components/gcs_store.py)."""
    auto_mode: bool | None = False
    """EKS Auto Mode makes the GPU nodes (config key nodeProvisioning autoMode); the system node group stays."""
    addon_versions: Mapping[str, str] | None = None
    """Versions of pulumi-eks's add-ons (vpc-cni, kube-proxy, coredns) kept in the stack (config key
    eksAddonVersions); one left out: pulumi-eks's choice, the newest for the cluster's version."""
    keep_data: bool | None = False
    """Protect the EKS cluster and its secrets key (Pulumi refuses to delete or replace them) and keep the
    control plane's log group when the stack is destroyed: outside dev (ray_llm_eks/domain/platform/teardown.py)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        facts = botocore_facts.load()
        check_cluster_name("name", self.name, ARGS)
        check_subnet_ids("private_subnet_ids", self.private_subnet_ids, "private", ARGS)
        check_subnet_ids("public_subnet_ids", self.public_subnet_ids, "public", ARGS)
        check_kubernetes_version("kubernetes_version", self.kubernetes_version, ARGS)
        partition = facts.region_partition(check_region("region", self.region, facts, ARGS))
        admins = check_principal_arns("admin_principal_arns", self.admin_principal_arns, partition, ARGS)
        object.__setattr__(self, "admin_principal_arns", admins)
        public = check_public_access_cidrs("public_access_cidrs", self.public_access_cidrs, ARGS)
        object.__setattr__(self, "public_access_cidrs", public)
        object.__setattr__(self, "service_cidr", check_service_cidr("service_cidr", self.service_cidr, ARGS))
        object.__setattr__(self, "log_types", check_log_types("log_types", self.log_types, facts.eks_log_types, ARGS))
        check_log_retention("log_retention_days", self.log_retention_days, facts.log_retention_days, ARGS)
        system = self.system_nodes
        if system is None:
            given = config_keys.default("systemNodes")
            system = NodeGroupArgs(given["instanceType"], desired_size=given.get("desiredSize"))
        system = system.with_disk_default(sizing.SYSTEM_DISK_GIB)  # the Ray head pulls the serving image
        check_system_disk("system_nodes.disk_size_gib", system.disk_size_gib, ARGS)
        object.__setattr__(self, "system_nodes", system)
        check_environment("environment", self.environment, ARGS)


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
    logging into a log group we own, secrets encrypted with our KMS key, and the system nodes. The whole network
    (NAT routes included) must be there first: nodes need egress to join and pull images (dependsOn the Network)."""

    TYPE = "ray-llm-eks:cluster:Cluster"  # the shipped program's resources keep their URNs

    eks_cluster: eks.Cluster
    """The pulumi-eks cluster (GpuNodePool's cluster)."""
    node_role: aws.iam.Role
    """The IAM role of every node group (GpuNodePool's node_role)."""
    cluster_security_group_id: pulumi.Output[str]
    """The EKS cluster security group, which every node and pod has (LlmService's head_security_group_ids)."""
    kubeconfig: pulumi.Output[str]
    """The cluster's kubeconfig (a secret), for a Kubernetes provider."""

    def __init__(
        self,
        name: str,
        args: ClusterArgs,
        opts: pulumi.ResourceOptions | None = None,
        network: pulumi.Resource | None = None,
    ):
        """`network`: the VPC's component, which the control plane waits for as a whole (not only the subnets it
        names): a caller of the hosted component says so with dependsOn."""
        super().__init__(self.TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.name = args.name
        region = args.region
        partition = botocore_facts.load().region_partition(region)
        addons = dict(args.addon_versions or {})

        # EKS creates /aws/eks/<name>/cluster itself when logging is on and never deletes it;
        # declared here first, it has a retention period and `destroy` removes it.
        # Kept by `destroy` where the stack keeps data (an audit reads it after the cluster is gone).
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{args.name}/cluster",
            retention_in_days=args.log_retention_days,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=args.keep_data or None),
        )
        protected = pulumi.ResourceOptions(parent=self, protect=args.keep_data or None)
        # Envelope encryption of Kubernetes Secrets (the Hugging Face token lives in one).
        self.secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets encryption for {args.name}",
            enable_key_rotation=True,
            deletion_window_in_days=7,
            opts=protected,
        )
        node_role = NodeRole(f"{name}-node-role", region, opts=child)
        self.node_role = node_role.role

        self.eks_cluster = eks.Cluster(
            name,
            name=args.name,
            version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            # As given: a list, or one output of another resource (the provider host passes a wired list so).
            private_subnet_ids=args.private_subnet_ids,
            public_subnet_ids=args.public_subnet_ids,
            node_associate_public_ip_address=False,
            authentication_mode=eks.AuthenticationMode.API,
            skip_default_node_group=True,
            # No instance_roles: pulumi-eks refuses them with authentication mode API, and EKS creates
            # the access entries of managed node groups itself.
            access_entries=admin_access_entries(args.admin_principal_arns, partition),
            endpoint_private_access=True,
            endpoint_public_access=True,
            public_access_cidrs=list(args.public_access_cidrs),
            kubernetes_service_ip_address_range=args.service_cidr,
            enabled_cluster_log_types=list(args.log_types),
            encryption_config_key_arn=self.secrets_key.arn,
            # No IAM OIDC provider: every AWS role here is a Pod Identity role, and pulumi-eks makes one only when
            # asked (nodejs/eks/cluster/cluster.ts createOidcProvider, default false) and uses it for nothing but
            # its oidcProviderArn output.
            # The VPC CNI add-on's network policy agent (its configurationValues enableNetworkPolicy):
            # without it NetworkPolicy objects are accepted and ignored.
            # Security groups for pods (the GCS store admits the Ray head's group only,
            # ray_llm_eks/components/gcs_store.py):
            # the CNI's ENABLE_POD_ENI, and TCP early demux off so the kubelet's TCP/HTTP probes still reach
            # a pod on a branch interface (pulumi-eks VpcCniOptions, EKS user guide security-groups-for-pods).
            vpc_cni_options=eks.VpcCniOptionsArgs(
                enable_network_policy=args.network_policies,
                enable_pod_eni=args.pod_security_groups or None,
                disable_tcp_early_demux=args.pod_security_groups or None,
                addon_version=addons.get("vpc-cni"),
            ),
            # The policy pack reads the environment here (policy/rules.py, api-endpoint-restricted).
            cluster_tags={ENVIRONMENT_TAG: args.environment},
            # pulumi_eks_addon_options' kube-proxy (with its kept version) over auto_mode_options' own.
            **{**(auto_mode_options() if args.auto_mode else {}), **pulumi_eks_addon_options(addons, args.auto_mode)},
            # The whole network (NAT routes included) first: nodes need egress to join and pull
            # images; on destroy the cluster goes before the routes it relies on.
            # protect: its own resources too (the control plane, its role and security groups), which pulumi-eks
            # creates as its children and which inherit it.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=present(network, self.log_group, node_role),
                protect=args.keep_data or None,
            ),
        )

        if args.pod_security_groups:
            # The VPC resource controller (EKS's, in the control plane) attaches the branch interfaces with
            # the cluster role: AWS's managed policy for it (EKS user guide, security-groups-for-pods).
            aws.iam.RolePolicyAttachment(
                f"{name}-vpc-resource-controller",
                role=self.eks_cluster.eks_cluster.role_arn.apply(lambda arn: arn.rsplit("/", 1)[-1]),
                policy_arn=f"arn:{partition}:iam::aws:policy/AmazonEKSVPCResourceController",
                opts=child,
            )
        self.cluster_security_group_id = self.eks_cluster.cluster_security_group_id

        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks_cluster,
            node_role=self.node_role,
            # In the GPU nodes' zone: EBS volumes are zonal (Prometheus's,
            # ray_llm_eks/domain/telemetry/observability.py), and a
            # node replaced into another zone would strand the pod that mounts one; the Ray head also sits
            # next to its workers. The GPU zone holds every GPU node anyway (EFA), so a second zone would
            # keep nothing serving.
            subnet_ids=[args.system_subnet_id],
            instance_types=[args.system_nodes.instance_type],
            scaling_config=scaling(args.system_nodes),
            disk_size=args.system_nodes.disk_size_gib,
            ami_type="AL2023_x86_64_STANDARD",
            labels=SYSTEM_LABELS,
            enable_imd_sv2=True,  # also makes pulumi-eks build the launch template the transform sets
            opts=pulumi.ResourceOptions(parent=self, transforms=[hop_limit_one]),
        )

        # Built once from the kubeconfig; nothing that changes is interpolated into it, since a
        # replaced provider replaces every Kubernetes object on it.
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.eks_cluster.kubeconfig_json, opts=pulumi.ResourceOptions(parent=self)
        )
        self.kubeconfig = pulumi.Output.secret(self.eks_cluster.kubeconfig_json)
        self.register_outputs({"clusterName": args.name, "kubeconfig": self.kubeconfig})
