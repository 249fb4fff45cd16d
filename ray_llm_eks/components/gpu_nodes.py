"""GpuNodePool: one managed node group per GPU pool (EFA-enabled for the prefill/decode roles).

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import yaml

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.cluster import NodeGroupArgs, scaling
from ray_llm_eks.components.node_metadata import hop_limit_one
from ray_llm_eks.components.node_template_tags import NodeTemplateTags, NodeTemplateTagsArgs
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.fit.scaling import pool_scales
from ray_llm_eks.domain.platform import aws_facts, sizing
from ray_llm_eks.domain.platform.aws_facts import InstanceSpec
from ray_llm_eks.domain.platform.field_checks import check_ami_pin, check_gpu_instance_type, check_kubernetes_version
from ray_llm_eks.domain.platform.placement import GPU_TAINT, gpu_labels

ARGS = "GpuNodePoolArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())

# nodeadm's local storage: one RAID0 array from all instance-store NVMe at LOCAL_NVME_ROOT.
NODE_CONFIG = yaml.safe_dump(
    {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
    },
    sort_keys=False,
)


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """One GPU pool's nodes: a GPU type with instance-store NVMe, its bounds, its pinned AMI, EFA or not."""

    nodes: NodeGroupArgs
    """The pool's instance type (a GPU type of ray_llm_eks/domain/platform/aws_facts.py), bounds and root volume
    (gpuPools)."""
    availability_zone: str
    """The GPU subnet's zone: an EFA pool's cluster placement group is there (config key gpuAvailabilityZone)."""
    cluster: pulumi.Input[eks.Cluster]
    """The pulumi-eks cluster the node group joins (Cluster's eks_cluster)."""
    node_role: pulumi.Input[aws.iam.Role]
    """The nodes' IAM role (Cluster's node_role)."""
    subnet_id: pulumi.Input[str]
    """The private subnet of availability_zone every node goes in (Network's gpu_subnet_id)."""
    kubernetes_version: str | None = default("kubernetesVersion")
    """The cluster's EKS version: the AMI's (config key kubernetesVersion)."""
    ami_release_version: str | None = None
    """An EKS AL2023 NVIDIA AMI release such as v20261112 (config key gpuAmiReleaseVersion), or ami_id."""
    ami_id: str | None = None
    """An AMI id such as ami-0123456789abcdef0 (config key gpuAmiId), or ami_release_version."""
    efa: bool | None = False
    """EFA interfaces on every network card and a cluster placement group (PD pools move the KV cache over EFA)."""
    instance: InstanceSpec | None = None
    """The hardware of nodes.instance_type where ray_llm_eks/domain/platform/aws_facts.py lacks it (a stack's
    instanceTypes); checked as the table's types are."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        nodes = self.nodes.with_disk_default(sizing.GPU_DISK_GIB)
        table = aws_facts.with_type(nodes.instance_type, self.instance)
        spec = check_gpu_instance_type(
            "nodes.instance_type", nodes.instance_type, botocore_facts.load(), self.efa, ARGS, table
        )
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "instance", spec)
        check_kubernetes_version("kubernetes_version", self.kubernetes_version, ARGS)
        check_ami_pin(("ami_release_version", "ami_id"), self.ami_release_version, self.ami_id, ARGS)

    @property
    def scales(self) -> bool:
        """The Cluster Autoscaler may change this pool's size."""
        return pool_scales(self.nodes.min_size, self.nodes.max_size)


def ami_parameter(kubernetes_version: str, release_version: str) -> str:
    """SSM public parameter of one exact EKS AL2023 NVIDIA AMI release (never `recommended`)."""
    v = kubernetes_version
    return (
        f"/aws/service/eks/optimized-ami/{v}/amazon-linux-2023/x86_64/nvidia/"
        f"amazon-eks-node-al2023-x86_64-nvidia-{v}-{release_version}/image_id"
    )


class GpuNodePool(pulumi.ComponentResource):
    """GPU nodes of one pool, all in the GPU subnet, in one cluster placement group (pulumi-eks
    builds the EFA launch template: one EFA interface per network card, placement group, checks)."""

    TYPE = "ray-llm-eks:gpu_nodes:GpuNodePool"  # the shipped program's resources keep their URNs

    node_group_name: pulumi.Output[str]
    """The EKS managed node group's name."""
    ami_id: pulumi.Output[str]
    """The AMI of every node (ami_id, or the release's from SSM)."""

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        self.pool_name = name
        if args.ami_id is not None:
            ami_id = pulumi.Output.from_input(args.ami_id)
        else:
            ami_id = aws.ssm.get_parameter_output(
                name=ami_parameter(args.kubernetes_version, args.ami_release_version),
                opts=pulumi.InvokeOutputOptions(parent=self),
            ).value
        self.ami_id = ami_id

        self.node_group = eks.ManagedNodeGroup(
            f"{name}-gpu",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=[args.subnet_id],
            instance_types=[args.nodes.instance_type],
            scaling_config=scaling(args.nodes),
            disk_size=args.nodes.disk_size_gib,
            ami_id=ami_id,
            operating_system=eks.OperatingSystem.AL2023,  # nodeadm user data for the pinned AL2023 AMI
            # The collocated baseline moves no KV cache between nodes: no EFA, no placement group.
            enable_efa_support=args.efa,
            placement_group_availability_zone=args.availability_zone if args.efa else None,
            enable_imd_sv2=True,
            nodeadm_extra_options=[
                eks.NodeadmOptionsArgs(content=NODE_CONFIG, content_type="application/node.eks.aws")
            ],
            labels=gpu_labels(name),
            taints=[aws.eks.NodeGroupTaintArgs(**GPU_TAINT)],
            # The Cluster Autoscaler owns desiredSize between min and max: `up` must not reset it.
            ignore_scaling_changes=True if args.scales else None,
            opts=pulumi.ResourceOptions(parent=self, transforms=[hop_limit_one]),  # hop limit 1
        )
        self.node_group_name = self.node_group.node_group.node_group_name
        if args.scales:  # the Cluster Autoscaler may take it to zero and must grow it back
            self.template_tags = NodeTemplateTags(
                f"{name}-node-template",
                NodeTemplateTagsArgs(name, args.nodes.instance_type, args.efa, args.instance),
                self.node_group.node_group,
                pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"nodeGroupName": self.node_group_name, "amiId": ami_id})
