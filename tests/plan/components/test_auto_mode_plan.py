"""nodeProvisioning: autoMode on the plan (dp, a collocated stack): pulumi-eks's Cluster with Auto Mode
beside the system node group, one NodePool and one Auto Mode NodeClass per GPU pool (the NodePool valid
against the pinned Karpenter CRD), no GPU node group, Cluster Autoscaler or device plugins, the
management fee and the Auto Mode warning in the plan, and the destroy order Pulumi derives."""

from __future__ import annotations

import pytest

from offline.plan import Plan, run_program
from ray_llm_eks.domain.cluster import node_provisioning
from tests.conftest import failing_run
from tests.plan.components.test_karpenter_plan import NODE_POOL, RAY_SERVICE, RELEASE, manifest
from tests.unit.domain.cluster.test_karpenter import crd_validator, errors

NS = "ray-llm-eks:"
AUTO = {NS + "nodeProvisioning": "autoMode"}
NODE_CLASS = "kubernetes:eks.amazonaws.com/v1:NodeClass"


@pytest.fixture(scope="module")
def plan() -> Plan:
    return run_program("dp", AUTO)


def test_the_cluster_runs_auto_mode_beside_the_system_node_group(plan):
    cluster = plan.one("eks:index:Cluster").inputs
    assert cluster["autoMode"] == {"enabled": True, "createNodeRole": True, "computeConfig": {"nodePools": ["system"]}}
    # pulumi-eks skips both add-ons under Auto Mode; the system node group needs them.
    assert cluster["useDefaultVpcCni"] is False and cluster["kubeProxyAddonOptions"]["enabled"] is True
    assert cluster["vpcCniOptions"]["enableNetworkPolicy"] is True
    assert [r.name for r in plan.of_type("eks:index:ManagedNodeGroup")] == ["eks-system"]
    releases = {r.name for r in plan.of_type(RELEASE)}
    assert not releases & {"cluster-autoscaler", "karpenter", "nvidia-device-plugin", "efa-device-plugin"}, releases


def test_one_node_pool_and_auto_mode_node_class_per_gpu_pool(plan):
    schema = crd_validator("karpenter.sh_nodepools.v1.14.1.yaml")
    (pool,) = plan.of_type(NODE_POOL)
    assert errors(schema, manifest(pool)) == []
    assert pool.inputs["spec"]["template"]["spec"]["nodeClassRef"]["group"] == "eks.amazonaws.com"
    (node_class,) = plan.of_type(NODE_CLASS)
    assert node_class.inputs["spec"]["role"] == "<known after deploy: eks:index:Cluster::eks.autoModeNodeRoleName>"
    assert plan.depends_on(pool.urn, node_class.urn)
    assert plan.depends_on(plan.one(RAY_SERVICE).urn, pool.urn)  # the workers go before their nodes
    groups = plan.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert all(g["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true" for g in groups)


def test_the_plan_warns_what_auto_mode_does_not_allow_and_prices_its_fee(plan):
    assert node_provisioning.AUTO_MODE_LIMITS in plan.warnings
    estimate = plan.outputs["costEstimate"]
    assert "EKS Auto Mode fee, collocated nodes g6.12xlarge" in estimate["unknownPrices"]
    assert estimate["pricesToSet"] == ["prices.autoModeFees.g6.12xlarge"]
    assert any("replaces every node within 21 days" in line for line in plan.outputs["upgradeImpact"])


def test_a_pd_stack_is_refused_before_any_resource():
    error, monitor = failing_run(AUTO)
    assert "managedNodeGroups or karpenter for a stack with PD pools" in str(error) and "\n" not in str(error)
    assert monitor.registrations == []
