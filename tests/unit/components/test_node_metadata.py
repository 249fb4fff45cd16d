"""The node groups' metadata transform, and its field names and values against botocore's EC2 model."""

from __future__ import annotations

import re

import botocore.loaders
import pulumi

from offline.eks_rules import managed_launch_template
from ray_llm_eks.components.node_metadata import LAUNCH_TEMPLATE, hop_limit_one
from ray_llm_eks.domain.core.facts import NODE_METADATA_OPTIONS


def _args(type_: str, props: dict) -> pulumi.ResourceTransformArgs:
    return pulumi.ResourceTransformArgs(True, type_, "g-launchTemplate", props, pulumi.ResourceOptions())


def test_the_transform_sets_hop_limit_1_and_keeps_the_rest_of_pulumi_eks_template():
    built = {
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2, "httpEndpoint": "enabled"},
        "placement": {"groupName": "pg"},
        "networkInterfaces": [{"interfaceType": "efa"}],
    }
    result = hop_limit_one(_args(LAUNCH_TEMPLATE, built))
    assert result.props["metadataOptions"]["httpPutResponseHopLimit"] == 1
    assert result.props["placement"] == built["placement"]
    assert result.props["networkInterfaces"] == built["networkInterfaces"]
    assert hop_limit_one(_args("aws:eks/nodeGroup:NodeGroup", {"x": 1})) is None


def test_pulumi_eks_template_model():
    """nodegroup.ts: a template only with one of customLaunchTemplateArgs, hop limit 2 under enableIMDSv2."""
    assert managed_launch_template({"instanceTypes": ["m7i.large"]}) is None
    assert managed_launch_template({"enableIMDSv2": True})["metadataOptions"]["httpPutResponseHopLimit"] == 2
    assert managed_launch_template({"amiId": "ami-1"}) == {}


def test_metadata_options_are_botocore_launch_template_fields():
    shapes = botocore.loaders.Loader().load_service_model("ec2", "service-2")["shapes"]
    members = shapes["LaunchTemplateInstanceMetadataOptionsRequest"]["members"]
    for key in NODE_METADATA_OPTIONS:
        assert key[0].upper() + key[1:] in members, key
    assert NODE_METADATA_OPTIONS["httpTokens"] in shapes["LaunchTemplateHttpTokensState"]["enum"]
    assert NODE_METADATA_OPTIONS["httpEndpoint"] in shapes["LaunchTemplateInstanceMetadataEndpointState"]["enum"]
    low, high = map(
        int, re.search(r"Integers from (\d+) to (\d+)", members["HttpPutResponseHopLimit"]["documentation"]).groups()
    )
    assert low <= NODE_METADATA_OPTIONS["httpPutResponseHopLimit"] <= high
