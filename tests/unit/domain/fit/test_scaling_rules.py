"""Scaling rules called directly (ray_llm_eks/domain/fit/scaling.py through the stack adapter): bounds that must agree
across Ray Serve, KubeRay and the node groups, the autoscaling key, several pools for one role. What the
program declares with them: tests/plan/components/test_scaling.py."""

from __future__ import annotations

import pytest

from tests.conftest import settings_error

NS = "ray-llm-eks:"
# A decode pool on L40S next to the L4 one (a second pool serving one role).
SECOND_DECODE_POOL = {
    "prefill": {"instanceType": "g6.8xlarge"},
    "decode": {"instanceType": "g6.8xlarge", "minSize": 1, "maxSize": 1},
    "decode-l40s": {"instanceType": "g6e.8xlarge", "serves": "decode", "minSize": 0, "maxSize": 1},
}


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"maxSize": 3}, ["gpuPools.prefill.maxSize = 3", "at least 4", "max_replicas 4"]),
        ({"minSize": 3, "maxSize": 4}, ["gpuPools.prefill.minSize = 3", "at most 2", "min_replicas 2"]),
    ],
)
def test_bounds_that_disagree_across_layers_fail_naming_both_sides(pool, message):
    pools = {"prefill": {"instanceType": "g6.8xlarge", **pool}, "decode": {"instanceType": "g6.8xlarge"}}
    error = settings_error({NS + "gpuPools": pools}, stack="xpyd")
    assert all(part in str(error) for part in message), str(error)
    assert "autoscaling.prefill" in str(error)  # the other side, by the key that changes it


def test_autoscaling_key_checks_its_fields():
    error = settings_error({NS + "autoscaling": {"prefill": {"maxReplica": 2}}})
    assert "autoscaling.prefill.maxReplica" in str(error) and "did you mean maxReplicas?" in str(error)
    error = settings_error({NS + "autoscaling": {"prefill": {"maxReplicas": 1.5}}})
    assert "autoscaling.prefill.maxReplicas = 1.5" in str(error)
    error = settings_error({NS + "autoscaling": {"prefill": {"minReplicas": 3, "maxReplicas": 2}}})
    assert "autoscaling.prefill" in str(error) and "minReplicas <= initialReplicas <= maxReplicas" in str(error)


def _pools(**change) -> dict:
    return {NS + "gpuPools": {**SECOND_DECODE_POOL, **change}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            _pools(**{"decode-l40s": {"instanceType": "g6e.8xlarge", "serves": "decode"}}),
            "decode-l40s.minSize (not set)",
        ),
        (
            {**_pools(), NS + "autoscaling": {"decode": {"maxReplicas": 3}}},
            "room for 3 replica(s) in pools [decode, decode-l40s] together",
        ),
        (_pools(**{"decode-l40s": {"instanceType": "g6e.8xlarge"}}), "or a pool that sets `serves: <role>`"),
        (_pools(**{"decode-l40s": {**SECOND_DECODE_POOL["decode-l40s"], "serves": "decoder"}}), "decode-l40s.serves"),
        (
            _pools(**{"decode-l40s": {**SECOND_DECODE_POOL["decode-l40s"], "serves": ["prefill", "decode"]}}),
            "serves = [prefill, decode]: one role of the serve config (one pool each)",
        ),
    ],
)
def test_pools_sharing_a_role_are_checked_together(overrides, message):
    error = settings_error(overrides, stack="xpyd")
    assert message in str(error), str(error)
