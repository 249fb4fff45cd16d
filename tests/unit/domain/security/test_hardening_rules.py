"""The security settings' rules called directly: the environment, who may reach the API endpoint and
the load balancer, client namespaces. What the program declares with them: tests/plan/components/test_hardening.py
and tests/plan/components/test_load_balancer.py."""

from __future__ import annotations

import pytest

from tests.conftest import settings_error, settings_of

PROD_OPEN = {"ray-llm-eks:environment": "production"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (PROD_OPEN, "endpointPublicAccessCidrs (not set): required in environment production"),
        (
            {**PROD_OPEN, "ray-llm-eks:endpointPublicAccessCidrs": ["10.1.0.0/16", "0.0.0.0/0"]},
            "endpointPublicAccessCidrs = [10.1.0.0/16, 0.0.0.0/0]: your own networks in environment production: "
            "together at most 16,777,216 addresses (one /8; these reach 4,294,967,296)",
        ),
        (
            {
                **PROD_OPEN,
                "ray-llm-eks:endpointPublicAccessCidrs": ["203.0.113.0/24"],
                "ray-llm-eks:networkPolicies": False,
            },
            "networkPolicies = false: true in environment production: without them any pod of the cluster reaches "
            "the Ray head",
        ),
        ({"ray-llm-eks:environment": "prod"}, "environment = prod: one of [dev, staging, production]"),
        ({"ray-llm-eks:serveClientNamespaces": ["Apps"]}, "serveClientNamespaces = Apps"),
    ],
)
def test_unsafe_settings_are_refused(overrides, message):
    assert message in str(settings_error(overrides))


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        (["0.0.0.0/0"], "endpointSourceRanges = 0.0.0.0/0: a network narrower than the whole internet"),
        ([], "endpointSourceRanges = []: at least one CIDR"),
        (["10.0.0.1/16"], "endpointSourceRanges = 10.0.0.1/16: CIDR blocks"),
    ],
)
def test_bad_source_ranges_are_refused(ranges, message):
    assert message in str(settings_error({"ray-llm-eks:endpointSourceRanges": ranges}))


def test_the_default_source_ranges_are_the_vpc_less_its_pod_subnets():
    from ray_llm_eks.domain.platform.subnets import outside_pod_subnets, pod_subnet_cidrs

    assert settings_of().hardening.endpoint_source_ranges == ("10.0.128.0/17",)
    assert outside_pod_subnets("10.0.0.0/16", pod_subnet_cidrs("10.0.0.0/16", 1)) == ["10.0.64.0/18", "10.0.128.0/17"]
    assert outside_pod_subnets("10.20.0.0/16", pod_subnet_cidrs("10.20.0.0/16", 3)) == ["10.20.192.0/18"]


def test_a_source_range_overlapping_a_pod_subnet_is_refused_naming_what_is_allowed():
    error = settings_error({"ray-llm-eks:endpointSourceRanges": ["10.0.64.0/24"]})
    assert str(error) == (
        "Pulumi.dev.yaml: invalid config ray-llm-eks:endpointSourceRanges = 10.0.64.0/24: CIDR blocks outside the "
        "pod subnets "
        "[10.0.0.0/18, 10.0.64.0/18] (pods get in through serveClientNamespaces)"
    )


def test_an_existing_cluster_has_no_pod_subnets_of_ours_to_refuse():
    """Its VPC is not the stack's (vpcCidr describes nothing there), and it gets no internal endpoint."""
    settings = settings_of({"ray-llm-eks:existingCluster": True, "ray-llm-eks:endpointSourceRanges": ["10.0.0.0/16"]})
    assert settings.hardening.pod_subnets == () and not settings.hardening.internal_endpoint


WIDE = [
    ["0.0.0.0/1", "128.0.0.0/1"],  # 0.0.0.0/0 in two halves
    ["0.0.0.0/1"],
    ["44.0.0.0/7"],  # one block wider than a /8
    ["44.0.0.0/8", "45.0.0.0/24"],  # a /8 and a little more
    [f"{n}.0.0.0/9" for n in range(1, 4)],  # narrower blocks that together pass a /8
]


@pytest.mark.parametrize("cidrs", WIDE)
@pytest.mark.parametrize("environment", ["staging", "production"])
def test_public_endpoint_ranges_wider_than_one_slash_8_are_refused_outside_dev(cidrs, environment):
    error = settings_error({"ray-llm-eks:environment": environment, "ray-llm-eks:endpointPublicAccessCidrs": cidrs})
    assert f"your own networks in environment {environment}: together at most 16,777,216 addresses" in str(error)


def test_public_endpoint_ranges_of_a_slash_8_or_less_pass_and_dev_may_open_the_endpoint():
    ok = ["44.0.0.0/8", "44.1.2.0/24"]  # a /8, and a block inside it (overlaps counted once)
    settings = settings_of({"ray-llm-eks:environment": "production", "ray-llm-eks:endpointPublicAccessCidrs": ok})
    assert settings.hardening.environment == "production"
    assert settings_of({"ray-llm-eks:endpointPublicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"]})  # dev


def test_network_policies_may_be_off_in_dev_only():
    assert settings_of({"ray-llm-eks:networkPolicies": False}).hardening.network_policies is False
    error = settings_error(
        {
            "ray-llm-eks:environment": "staging",
            "ray-llm-eks:endpointPublicAccessCidrs": ["203.0.113.0/24"],
            "ray-llm-eks:networkPolicies": False,
        }
    )
    assert "networkPolicies = false: true in environment staging" in str(error)


def test_a_cluster_the_stack_does_not_make_needs_no_api_endpoint_networks():
    """endpointPublicAccessCidrs limits the API endpoint of the cluster the stack makes; on an existing cluster (a
    component on the user's own, too) production asks no networks of an endpoint it never sets."""
    settings = settings_of({**PROD_OPEN, "ray-llm-eks:existingCluster": True})
    assert settings.hardening.environment == "production" and settings.hardening.network_policies
