"""nodeProvisioning: karpenter on the plan: Karpenter's release, IAM, queue and rules, one NodePool and
one EC2NodeClass per GPU pool (validated against the pinned CRDs), no GPU node group and no Cluster
Autoscaler, the Ray workers marked do-not-disrupt, and the destroy order Pulumi derives. AWS fields
that Pulumi's mocks never check are checked against botocore's models."""

from __future__ import annotations

import json
import re

import botocore.loaders
import pytest

from offline.plan import Plan, run_program
from ray_llm_eks.domain.render import karpenter
from tests.conftest import failing_run
from tests.plan.components.test_preflight import ROOMY, aws_run
from tests.unit.domain.cluster.test_karpenter import crd_validator, errors

NS = "ray-llm-eks:"
# dev with Karpenter making its GPU nodes, prefill allowed on spot; two system nodes with room for
# the controller (1 CPU / 1 GiB) next to the Ray head: one m7i.xlarge has not.
KARPENTER = {
    NS + "nodeProvisioning": "karpenter",
    NS + "prefillSpot": True,
    NS + "systemNodes": {"instanceType": "m7i.2xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 3},
}
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
RELEASE = "kubernetes:helm.sh/v3:Release"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"


@pytest.fixture(scope="module")
def plan() -> Plan:
    return run_program("dev", KARPENTER)


def manifest(registration) -> dict:
    inputs = registration.inputs
    return {k: inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def test_karpenter_replaces_the_gpu_node_groups_and_the_cluster_autoscaler(plan):
    assert [r.name for r in plan.of_type("eks:index:ManagedNodeGroup")] == ["eks-system"]
    assert not any(r.name == "cluster-autoscaler" for r in plan.of_type(RELEASE))
    release = plan.one(RELEASE, "karpenter").inputs
    assert (release["chart"], release["version"], release.get("repositoryOpts")) == (
        "oci://public.ecr.aws/karpenter/karpenter",
        "1.14.1",
        None,
    )
    queue = plan.one("aws:sqs/queue:Queue").inputs
    assert release["values"]["settings"] == {"clusterName": "ray-llm-dev", "interruptionQueue": queue["name"]}
    assert release["values"]["replicas"] == 2
    association = plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "karpenter-pod-identity").inputs
    assert (association["namespace"], association["serviceAccount"]) == ("kube-system", "karpenter")


def test_one_node_pool_and_node_class_per_gpu_pool_valid_against_the_pinned_crds(plan):
    pools, classes = plan.of_type(NODE_POOL), plan.of_type(NODE_CLASS)
    assert sorted(r.inputs["metadata"]["name"] for r in pools) == ["decode", "prefill"]
    assert sorted(r.inputs["metadata"]["name"] for r in classes) == ["decode", "prefill"]
    pool_schema = crd_validator("karpenter.sh_nodepools.v1.14.1.yaml")
    class_schema = crd_validator("karpenter.k8s.aws_ec2nodeclasses.v1.14.1.yaml")
    for r in pools:
        assert errors(pool_schema, manifest(r)) == [], r.name
    for r in classes:
        assert errors(class_schema, manifest(r)) == [], r.name
        spec = r.inputs["spec"]
        assert spec["role"]  # the component's node role, resolved by the engine
        assert spec["placementGroupSelector"] == {"name": f"ray-llm-dev-{r.inputs['metadata']['name']}"}
        assert [i["interfaceType"] for i in spec["networkInterfaces"]] == ["interface", "efa-only"]
        assert spec["subnetSelectorTerms"] == [{"tags": {"Name": "ray-llm-dev-private-us-east-1a"}}]
    groups = sorted(r.inputs["name"] for r in plan.of_type("aws:ec2/placementGroup:PlacementGroup"))
    assert groups == ["ray-llm-dev-decode", "ray-llm-dev-prefill"]
    capacity = {
        r.inputs["metadata"]["name"]: {
            q["key"]: q["values"] for q in r.inputs["spec"]["template"]["spec"]["requirements"]
        }[karpenter.CAPACITY_TYPE_LABEL]
        for r in pools
    }
    assert capacity == {"prefill": ["spot", "on-demand"], "decode": ["on-demand"]}


def test_ray_workers_are_never_disrupted_by_karpenter(plan):
    groups = plan.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    for group in groups:
        assert group["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_interruption_queue_gets_the_five_event_patterns_of_karpenters_template(plan):
    rules = {
        json.dumps(json.loads(r.inputs["eventPattern"]), sort_keys=True)
        for r in plan.of_type("aws:cloudwatch/eventRule:EventRule")
    }
    assert rules == {
        json.dumps({"detail-type": [detail], "source": [source]}, sort_keys=True)
        for source, detail in karpenter_events()
    }
    queue_arn = plan.one("aws:sqs/queue:Queue").urn
    for target in plan.of_type("aws:cloudwatch/eventTarget:EventTarget"):
        assert plan.depends_on(target.urn, queue_arn)


def karpenter_events() -> list[tuple[str, str]]:
    # Karpenter v1.14.1's getting-started cloudformation.yaml, its five AWS::Events::Rule patterns.
    return [
        ("aws.health", "AWS Health Event"),
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
    ]


def test_aws_fields_are_values_the_apis_accept(plan):
    """Mocks echo any input; botocore's models say what EKS and EC2 take."""
    loader = botocore.loaders.Loader()
    eks = loader.load_service_model("eks", "service-2")["shapes"]
    ec2 = loader.load_service_model("ec2", "service-2")["shapes"]
    entry = plan.one("aws:eks/accessEntry:AccessEntry").inputs
    assert entry["type"] in access_entry_types(eks)
    for group in plan.of_type("aws:ec2/placementGroup:PlacementGroup"):
        assert group.inputs["strategy"] in ec2["PlacementStrategy"]["enum"]


def access_entry_types(eks: dict) -> list[str]:
    """EKS lists the access entry types in the `type` member's prose, its first paragraph (no enum shape)."""
    doc = eks["CreateAccessEntryRequest"]["members"]["type"]["documentation"]
    return re.findall(r"<code>([A-Z0-9_]+)</code>", doc.split("</p>")[0])


def test_destroy_removes_the_node_pools_before_karpenter_and_the_workloads_before_the_node_pools(plan):
    """Pulumi deletes a resource before what it depends on: the RayService (its pods) goes first,
    then the NodePools (Karpenter drains and terminates their nodes), the node classes, the release."""
    release = plan.one(RELEASE, "karpenter").urn
    service = plan.one(RAY_SERVICE).urn
    for pool in plan.of_type(NODE_POOL):
        assert plan.depends_on(pool.urn, release)
        assert all(plan.depends_on(pool.urn, c.urn) for c in plan.of_type(NODE_CLASS))
        assert plan.depends_on(service, pool.urn)
    for node_class in plan.of_type(NODE_CLASS):
        assert plan.depends_on(node_class.urn, release)
        assert plan.depends_on(node_class.urn, plan.one("aws:eks/accessEntry:AccessEntry").urn)


def test_the_default_plan_has_no_karpenter(dev):
    assert not dev.of_type(NODE_POOL) and not dev.of_type("aws:sqs/queue:Queue")
    groups = dev.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert all("karpenter.sh/do-not-disrupt" not in g["template"]["metadata"]["annotations"] for g in groups)


def test_one_system_node_without_room_for_the_controller_is_refused():
    error, _ = failing_run({NS + "nodeProvisioning": "karpenter"})
    assert "systemNodes.instanceType = m7i.xlarge: a type with room for the Ray head and system pods" in str(error)


def test_preflight_counts_every_type_karpenter_may_make():
    """g6.8xlarge is not offered in the GPU zone, g6.16xlarge is: Karpenter can still make the pools'
    nodes, and the GPU quota counts the larger type."""
    offered = {"g6.8xlarge": ["us-east-1b"], "g6.16xlarge": ["us-east-1a"], "m7i.2xlarge": ["us-east-1a"]}
    _, run = aws_run(offered, ROOMY, overrides=KARPENTER)
    checks = run().outputs["preflightChecks"]
    assert "ok: instance types ['g6.16xlarge', 'g6.8xlarge', 'm7i.2xlarge'] are offered in their zones" in checks
    assert any("L-DB2E81BA" in c and "128 <= 128" in c for c in checks), checks


def test_cost_and_change_summary_say_karpenter_makes_the_gpu_nodes(plan):
    items = [line["item"] for line in plan.outputs["costEstimate"]["lines"]]
    assert "prefill nodes g6.8xlarge (Karpenter: spot first, on-demand price shown)" in items
    assert "decode nodes g6.8xlarge (Karpenter, on-demand)" in items
    assert any(line.startswith("node class or pool change") for line in plan.outputs["upgradeImpact"])
