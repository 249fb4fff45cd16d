"""NodeTemplateTags: the Cluster Autoscaler's picture of a node, as tags on a GPU pool's Auto Scaling
group, so a pool at zero nodes can grow (ray_llm_eks/domain/fit/scaling.py names the tags)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from ray_llm_eks.adapters import botocore_facts
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.domain.fit.scaling import node_template_tags
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.aws_facts import InstanceSpec
from ray_llm_eks.domain.platform.field_checks import check_gpu_instance_type, check_label_value

ARGS = "NodeTemplateTagsArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class NodeTemplateTagsArgs:
    """What a node of one GPU pool looks like to the Cluster Autoscaler: its pool label, GPUs and EFA devices."""

    pool_name: str
    """The pool's name: its nodes' pool label, which its Ray worker group selects (config key gpuPools)."""
    instance_type: str
    """The pool's GPU instance type: the GPUs and EFA devices a node advertises
    (ray_llm_eks/domain/platform/aws_facts.py)."""
    efa: bool | None = False
    """The pool's nodes have EFA interfaces, one per network card, and advertise them as devices."""
    instance: InstanceSpec | None = None
    """The hardware of instance_type where ray_llm_eks/domain/platform/aws_facts.py lacks it (a stack's
    instanceTypes)."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_label_value("pool_name", self.pool_name, ARGS)
        table = aws_facts.with_type(self.instance_type, self.instance)
        spec = check_gpu_instance_type(
            "instance_type", self.instance_type, botocore_facts.load(), self.efa, ARGS, table
        )
        object.__setattr__(self, "instance", spec)


def first_asg_name(resources: list) -> str:
    """The node group's Auto Scaling group: EKS creates one per managed node group and reports it in
    `resources[0].autoscalingGroups[0].name` (known after the node group exists)."""
    return resources[0].autoscaling_groups[0].name


class NodeTemplateTags(pulumi.ComponentResource):
    """One aws.autoscaling.Tag per template tag. A managed node group's own tags stay on the EKS
    resource and never reach its ASG, so they are set on the ASG itself, in the graph (destroyed with
    it). Not propagated at launch: they describe nodes, they do not label instances."""

    def __init__(
        self,
        name: str,
        args: NodeTemplateTagsArgs,
        node_group: pulumi.Output[aws.eks.NodeGroup],
        opts: pulumi.ResourceOptions,
    ):
        super().__init__("ray-llm-eks:node_template_tags:NodeTemplateTags", name, None, opts)
        # ManagedNodeGroup.node_group is an Output of the NodeGroup (Output.resources is a method of Output).
        asg_name = node_group.apply(lambda group: group.resources).apply(first_asg_name)
        self.tags = {
            key: aws.autoscaling.Tag(
                f"{name}-{re.sub(r'[^A-Za-z0-9]+', '-', key.rsplit('node-template/', 1)[1])}",
                autoscaling_group_name=asg_name,
                tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for key, value in node_template_tags(args.pool_name, args.instance, args.efa).items()
        }
        self.register_outputs({"autoscalingGroupName": asg_name})
