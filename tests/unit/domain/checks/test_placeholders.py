"""Values documentation reserves for the reader's own (ray_llm_eks/domain/checks/placeholders.py): planned with a
warning, refused when deploying; a real value of the same shape passes."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.checks import placeholders
from ray_llm_eks.domain.core.errors import ConfigError
from tests.conftest import STACKS, settings_of

PROD = "prod"
NS = "ray-llm-eks:"


@pytest.mark.parametrize(
    ("overrides", "key", "value"),
    [
        ({NS + "endpointPublicAccessCidrs": ["198.51.100.7/32"]}, "endpointPublicAccessCidrs", "198.51.100.7/32"),
        ({"ray-llm-eks:endpointSourceRanges": ["2001:db8::/48"]}, "endpointSourceRanges", "2001:db8::/48"),
        ({"ray-llm-eks:endpointSourceRanges": ["192.0.2.0/24"]}, "endpointSourceRanges", "192.0.2.0/24"),
        (
            {"ray-llm-eks:clusterAdmins": ["arn:aws:iam::123456789012:role/ci"]},
            "clusterAdmins",
            "arn:aws:iam::123456789012:role/ci",
        ),
        (
            {"ray-llm-eks:gpuAmiReleaseVersion": None, "ray-llm-eks:gpuAmiId": "ami-0123456789abcdef0"},
            "gpuAmiId",
            "ami-0123456789abcdef0",
        ),
    ],
)
def test_a_placeholder_is_refused_when_deploying_and_warned_while_planning(overrides, key, value):
    settings = settings_of({"ray-llm-eks:endpointPublicAccessCidrs": ["8.8.4.0/24"], **overrides}, PROD)
    with pytest.raises(ConfigError) as caught:
        placeholders.check(settings, deploying=True)
    assert (caught.value.key, caught.value.value) == (key, value)
    (warning,) = placeholders.check(settings, deploying=False)
    assert warning.startswith(f"{key} = {value}: ") and warning.endswith("`pulumi up` refuses it")


def test_real_values_of_the_same_shape_pass():
    settings = settings_of(
        {
            "ray-llm-eks:endpointPublicAccessCidrs": ["203.0.114.0/24"],
            "ray-llm-eks:endpointSourceRanges": ["2001:db9::/48", "172.31.0.0/16"],
            "ray-llm-eks:clusterAdmins": ["arn:aws:iam::210987654321:role/ci"],
        },
        PROD,
    )
    assert placeholders.check(settings, deploying=True) == []


def test_of_the_shipped_stacks_only_prod_holds_one_and_it_still_plans():
    found = {stack: [(e.key, e.value) for e in placeholders.found(settings_of(stack=stack))] for stack in STACKS}
    assert found.pop(PROD) == [("endpointPublicAccessCidrs", "203.0.113.0/24")]
    assert not any(found.values()), found
