"""Instance metadata closed to pods on every node group: a transform that sets the hop limit to 1 on
the launch template pulumi-eks builds inside a ManagedNodeGroup.

pulumi-eks 4.4 builds its own launch template whenever `enableIMDSv2`, `amiId`, `enableEfaSupport` or
nodeadm options are set (nodejs/eks/nodes/nodegroup.ts, requiresCustomLaunchTemplate), writes hop limit
2 under `enableIMDSv2` (createMNGCustomLaunchTemplate) and refuses a `launchTemplate` of ours beside
those options. A Pulumi transform reaches the children of a packaged component (the engine calls it
back for each), so the template keeps everything pulumi-eks puts in it (EFA interfaces per network
card, placement group, nodeadm user data, AMI, disk) and only its metadata options change."""

from __future__ import annotations

import pulumi

from ray_llm_eks.domain.core.facts import NODE_METADATA_OPTIONS

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def hop_limit_one(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """The launch template's metadataOptions replaced by NODE_METADATA_OPTIONS; every other resource
    (the node group, its placement group) untouched. A packaged component's children arrive with the
    engine's camelCase property names."""
    if args.type_ != LAUNCH_TEMPLATE:
        return None
    return pulumi.ResourceTransformResult(
        props={**args.props, "metadataOptions": dict(NODE_METADATA_OPTIONS)}, opts=args.opts
    )
