"""The security settings' rules called directly: the environment, who may reach the API endpoint and
the load balancer, client namespaces. What the program declares with them: tests/plan/test_hardening.py
and tests/plan/test_load_balancer.py."""

from __future__ import annotations

import pytest

from tests.conftest import settings_error

PROD_OPEN = {"ray-llm-eks:environment": "production"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (PROD_OPEN, "endpointPublicAccessCidrs (not set): required in environment production"),
        (
            {**PROD_OPEN, "ray-llm-eks:endpointPublicAccessCidrs": ["10.1.0.0/16", "0.0.0.0/0"]},
            "endpointPublicAccessCidrs = [0.0.0.0/0]: not open to the whole internet",
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
