"""GpuNodePool: one managed node group per GPU pool (EFA-enabled for the prefill/decode roles)."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import yaml

from components.cluster import Cluster, scaling
from components.network import Network
from components.node_metadata import hop_limit_one
from components.node_template_tags import NodeTemplateTags
from domain.placement import GPU_TAINT, gpu_labels
from domain.scaling import pool_scales
from domain.settings import GpuPoolSettings

# nodeadm's local storage: one RAID0 array from all instance-store NVMe at LOCAL_NVME_ROOT.
NODE_CONFIG = yaml.safe_dump(
    {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
    },
    sort_keys=False,
)


def ami_parameter(pool: GpuPoolSettings) -> str:
    """SSM public parameter of one exact EKS AL2023 NVIDIA AMI release (never `recommended`)."""
    v = pool.kubernetes_version
    return (
        f"/aws/service/eks/optimized-ami/{v}/amazon-linux-2023/x86_64/nvidia/"
        f"amazon-eks-node-al2023-x86_64-nvidia-{v}-{pool.ami.release_version}/image_id"
    )


class GpuNodePool(pulumi.ComponentResource):
    """GPU nodes of one pool, all in the GPU subnet, in one cluster placement group (pulumi-eks
    builds the EFA launch template: one EFA interface per network card, placement group, checks)."""

    def __init__(
        self,
        name: str,
        settings: GpuPoolSettings,
        cluster: Cluster,
        network: Network,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:gpu_nodes:GpuNodePool", name, None, opts)
        self.pool_name = name
        if settings.ami.ami_id is not None:
            ami_id = pulumi.Output.from_input(settings.ami.ami_id)
        else:
            ami_id = aws.ssm.get_parameter_output(
                name=ami_parameter(settings), opts=pulumi.InvokeOutputOptions(parent=self)
            ).value
        self.ami_id = ami_id

        self.node_group = eks.ManagedNodeGroup(
            f"{name}-gpu",
            cluster=cluster.eks,
            node_role=cluster.node_role.role,
            subnet_ids=[network.gpu_subnet_id],
            instance_types=[settings.nodes.instance_type],
            scaling_config=scaling(settings.nodes),
            disk_size=settings.nodes.disk_size_gib,
            ami_id=ami_id,
            operating_system=eks.OperatingSystem.AL2023,  # nodeadm user data for the pinned AL2023 AMI
            # The collocated baseline moves no KV cache between nodes: no EFA, no placement group.
            enable_efa_support=settings.efa,
            placement_group_availability_zone=settings.availability_zone if settings.efa else None,
            enable_imd_sv2=True,
            nodeadm_extra_options=[
                eks.NodeadmOptionsArgs(content=NODE_CONFIG, content_type="application/node.eks.aws")
            ],
            labels=gpu_labels(name),
            taints=[aws.eks.NodeGroupTaintArgs(**GPU_TAINT)],
            # The Cluster Autoscaler owns desiredSize between min and max: `up` must not reset it.
            ignore_scaling_changes=True if pool_scales(settings) else None,
            opts=pulumi.ResourceOptions(parent=self, transforms=[hop_limit_one]),  # hop limit 1
        )
        self.node_group_name = self.node_group.node_group.node_group_name
        if pool_scales(settings):  # the Cluster Autoscaler may take it to zero and must grow it back
            self.template_tags = NodeTemplateTags(
                f"{name}-node-template", settings, self.node_group.node_group, pulumi.ResourceOptions(parent=self)
            )
        self.register_outputs({"nodeGroupName": self.node_group_name, "amiId": ami_id})
