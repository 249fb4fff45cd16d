"""The offline plan's copy of pulumi-eks's input rules (offline/eks_rules.py), rule by rule, with
pulumi-eks's own messages. That a plan applies them: tests/plan/components/test_foundation.py."""

from __future__ import annotations

import re

import pytest

from offline import eks_rules


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"authenticationMode": "API", "instanceRoles": ["r"]}, "'instanceRoles' property does not support"),
        ({"authenticationMode": "API", "roleMappings": []}, "'roleMappings' property is not supported"),
        ({"authenticationMode": "CONFIG_MAP", "accessEntries": {"a": {}}}, "is set to 'CONFIG_MAP'"),
        (
            {"accessEntries": {"a": {}}},
            "'accessEntries' property is not supported when 'authenticationMode' is not set",
        ),
        ({"authenticationMode": "IAM"}, "Allowed values are: CONFIG_MAP, API_AND_CONFIG_MAP, API."),
    ],
)
def test_pulumi_eks_authentication_rules(inputs, message):
    with pytest.raises(eks_rules.PulumiEksRefusal, match=re.escape(message)):
        eks_rules.check_cluster(inputs)
    eks_rules.check_cluster({"authenticationMode": "API", "instanceRoles": [], "accessEntries": {"a": {}}})


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"nodeRole": "r", "enableEfaSupport": True}, "You must specify placementGroupAvailabilityZone"),
        ({"nodeRole": "r", "amiId": "ami-1", "amiType": "AL2023_x86_64_NVIDIA"}, "both amiId and amiType"),
        ({"nodeRole": "r", "launchTemplate": {"id": "lt"}, "nodeadmExtraOptions": []}, "custom launch template"),
        ({}, "An IAM role, or role ARN must be provided"),
    ],
)
def test_pulumi_eks_managed_node_group_rules(inputs, message):
    with pytest.raises(eks_rules.PulumiEksRefusal, match=re.escape(message)):
        eks_rules.check_managed_node_group(inputs)
