"""nodeProvisioning: autoMode in the domain: the NodePool (karpenter.sh/v1, validated against the pinned
Karpenter CRD, since Auto Mode's NodePool is Karpenter's) and the Auto Mode NodeClass of each GPU pool,
the stacks it takes and refuses, its fee in the cost table and what it does not allow."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.cluster import node_provisioning
from ray_llm_eks.domain.platform.placement import GPU_TAINT, ZONE_LABEL
from ray_llm_eks.domain.render import karpenter
from ray_llm_eks.domain.stack import cost
from tests.conftest import settings_error, settings_of
from tests.unit.domain.cluster.test_karpenter import crd_validator, errors

NS = "ray-llm-eks:"
AUTO = {NS + "nodeProvisioning": "autoMode"}
# The NodeClass fields AWS documents (EKS user guide create-node-class, "Node Class Specification", and its
# pod subnet, advanced networking and capacity reservation sections). No public CRD of
# nodeclasses.eks.amazonaws.com was found to vendor: ours may use these and no other.
DOCUMENTED_NODE_CLASS_FIELDS = {
    "role",
    "instanceProfile",
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "podSubnetSelectorTerms",
    "podSecurityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "snatPolicy",
    "networkPolicy",
    "networkPolicyEventLogs",
    "ephemeralStorage",
    "advancedNetworking",
    "advancedSecurity",
    "certificateBundles",
    "tags",
}


@pytest.fixture(scope="module")
def dp():
    return settings_of(AUTO, stack="dp")


def test_auto_mode_pools_validate_against_the_pinned_node_pool_crd(dp):
    schema = crd_validator("karpenter.sh_nodepools.v1.14.1.yaml")
    for pool in dp.gpu_pools.values():
        manifest = karpenter.node_pool(
            pool, karpenter.auto_mode_node_class_ref(pool), expire_after=karpenter.AUTO_MODE_EXPIRE_AFTER
        )
        assert errors(schema, manifest) == []
        spec = manifest["spec"]["template"]["spec"]
        assert spec["nodeClassRef"] == {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": pool.name}
        assert spec["expireAfter"] == "504h"  # Auto Mode's 21-day limit, never "Never"
        assert spec["taints"][0]["key"] == GPU_TAINT["key"]
        assert {r["key"]: r["values"] for r in spec["requirements"]}[ZONE_LABEL] == [pool.availability_zone]
        manifest["spec"]["template"]["spec"]["expireAfter"] = "21 days"
        assert any("expireAfter" in e for e in errors(schema, manifest))


def test_auto_mode_node_class_uses_documented_fields_only(dp):
    (pool,) = dp.gpu_pools.values()
    manifest = karpenter.auto_mode_node_class(
        pool, node_role="r", subnet_tags={"Name": "s"}, security_group_tags={"aws:eks:cluster-name": "c"}
    )
    assert (manifest["apiVersion"], manifest["kind"]) == ("eks.amazonaws.com/v1", "NodeClass")
    assert set(manifest["spec"]) <= DOCUMENTED_NODE_CLASS_FIELDS
    assert manifest["spec"]["ephemeralStorage"] == {"size": f"{pool.nodes.disk_size_gib}Gi"}
    assert manifest["spec"]["subnetSelectorTerms"] == [{"tags": {"Name": "s"}}]


def test_a_pool_that_needs_efa_gets_no_auto_mode_node_class():
    pool = settings_of().gpu_pools["prefill"]
    with pytest.raises(ValueError, match="needs EFA"):
        karpenter.auto_mode_node_class(pool, node_role=None, subnet_tags={}, security_group_tags={})


@pytest.mark.parametrize("stack", ["baseline", "dp", "tp"])
def test_collocated_stacks_take_auto_mode(stack):
    chosen = settings_of(AUTO, stack=stack).node_provisioning
    assert chosen.by_auto_mode and chosen.by_node_pools and not chosen.by_karpenter
    assert node_provisioning.warnings(chosen) == [node_provisioning.AUTO_MODE_LIMITS]


@pytest.mark.parametrize(
    ("stack", "overrides", "message"),
    [
        ("dev", AUTO, "nodeProvisioning = autoMode: managedNodeGroups or karpenter for a stack with PD pools"),
        ("xpyd", AUTO, "Auto Mode's NodeClass sets no EFA interfaces and no placement group"),
        ("dp", {**AUTO, NS + "prefillSpot": True}, "prefillSpot = 'true': only with nodeProvisioning: karpenter"),
        ("dp", {NS + "prices": {"autoModeFees": [1]}}, "prices.autoModeFees"),
        ("dp", {NS + "prices": {"autoModeFees": {"g6.12xlarge": -1}}}, "prices.autoModeFees.g6.12xlarge"),
    ],
)
def test_auto_mode_refusals_are_one_line(stack, overrides, message):
    error = settings_error(overrides, stack=stack)
    assert message in str(error) and "\n" not in str(error), str(error)


def test_the_management_fee_is_a_named_unknown_until_the_stack_prices_it(dp):
    estimate = cost.estimate(dp, dp.prices)
    (fee,) = [line for line in estimate.lines if line.item.startswith("EKS Auto Mode fee")]
    assert fee.item == "EKS Auto Mode fee, collocated nodes g6.12xlarge"
    assert fee.unit_usd_per_hour is None and estimate.usd_per_hour is None
    assert estimate.keys_to_set == ["prices.autoModeFees.g6.12xlarge"]
    assert any(line.item == "collocated nodes g6.12xlarge (EKS Auto Mode, on-demand)" for line in estimate.lines)
    priced = settings_of({**AUTO, NS + "prices": {"autoModeFees": {"g6.12xlarge": 0.5}}}, stack="dp")
    estimate = cost.estimate(priced, priced.prices)
    assert estimate.usd_per_hour is not None and estimate.unknown == []
    assert not any("Auto Mode" in line.item for line in cost.estimate(settings_of(stack="dp"), dp.prices).lines)
