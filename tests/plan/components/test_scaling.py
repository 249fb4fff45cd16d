"""Scaling per role across Ray Serve, KubeRay and the node groups (ray_llm_eks/domain/fit/scaling.py), on the plan."""

from __future__ import annotations

import json

import pytest
import yaml

from offline.plan import Plan, run_program
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.fit.scaling import NODE_TEMPLATE
from ray_llm_eks.domain.render.ray_service import AUTOSCALER_OWNED_WORKER_FIELDS
from tests.unit.domain.fit.test_scaling_rules import SECOND_DECODE_POOL

NS = "ray-llm-eks:"
MNG = "eks:index:ManagedNodeGroup"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
ASG_TAG = "aws:autoscaling/tag:Tag"


def cluster_spec(plan: Plan) -> dict:
    return plan.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]


def scaling_of(plan: Plan, role: str) -> tuple:
    """(Serve min, max) | (worker min, initial, max) | (nodes min, desired, max) of one role."""
    doc = yaml.safe_load(plan.one(RAY_SERVICE).inputs["spec"]["serveConfigV2"])
    args = doc["applications"][0]["args"]
    config = args[f"{role}_config"] if f"{role}_config" in args else args["llm_configs"][0]
    auto = config["deployment_config"]["autoscaling_config"]
    (group,) = [g for g in cluster_spec(plan)["workerGroupSpecs"] if g["groupName"] == role]
    pool = plan.one(MNG, f"{role}-gpu").inputs["scalingConfig"]
    return (
        (auto["min_replicas"], auto["max_replicas"]),
        (group["minReplicas"], group["replicas"], group["maxReplicas"]),
        (pool["minSize"], pool["desiredSize"], pool["maxSize"]),
    )


@pytest.fixture(scope="module")
def xpyd() -> Plan:
    return run_program("xpyd")


def test_node_bounds_follow_each_roles_replicas(xpyd):
    """pd-xpyd.yaml: prefill 2..4 replicas and decode 1..2, one GPU each on 1-GPU nodes."""
    assert scaling_of(xpyd, "prefill") == ((2, 4), (2, 2, 4), (2, 2, 4))
    assert scaling_of(xpyd, "decode") == ((1, 2), (1, 1, 2), (1, 1, 2))
    spec = cluster_spec(xpyd)
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}


def test_several_replicas_share_a_multi_gpu_node():
    """dp: 2..8 one-GPU replicas on 4-GPU g6.12xlarge nodes -> 1..2 nodes."""
    plan = run_program("dp")
    assert scaling_of(plan, "collocated") == ((2, 8), (1, 1, 2), (1, 1, 2))


def _flatten(value, path: tuple = ()) -> dict[tuple, object]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flatten(item, (*path, key)).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _flatten(item, (*path, i)).items()}
    return {path: value}


def _changed(before: dict, after: dict) -> set[tuple]:
    a, b = _flatten(before), _flatten(after)
    return {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}


def _replaced_by(patterns: list[str], path: tuple) -> bool:
    """Pulumi's rule (engine applyReplaceOnChanges, PropertyPath.Contains): a pattern replaces when it
    is a prefix of the changed path, `*` matching any key or index."""
    for pattern in patterns:
        parts = pattern.replace("[*]", ".*").replace('["', ".").replace('"]', "").split(".")
        if len(path) >= len(parts) and all(p in ("*", str(q)) for p, q in zip(parts, path, strict=False)):
            return True
    return False


def test_a_max_replicas_change_touches_only_its_role(xpyd):
    """Prefill max 4 -> 5: prefill's deployment, worker group and node bounds change, nothing of decode;
    the RayService is replaced (KubeRay passes no worker bound to a running RayCluster: make e2e)."""
    wider = run_program("xpyd", {NS + "autoscaling": {"prefill": {"maxReplicas": 5}}})
    before = {r.urn: r for r in xpyd.registrations}
    after = {r.urn: r for r in wider.registrations}
    assert before.keys() == after.keys()
    changed = {urn for urn in before if before[urn].inputs != after[urn].inputs}
    assert {before[u].name for u in changed} == {"prefill-gpu", "llm-rayservice"}
    assert _changed(before[wider.one(MNG, "prefill-gpu").urn].inputs, wider.one(MNG, "prefill-gpu").inputs) == {
        ("scalingConfig", "maxSize")
    }
    rs_before, rs_after = xpyd.one(RAY_SERVICE).inputs, wider.one(RAY_SERVICE).inputs
    serve_before = yaml.safe_load(rs_before["spec"]["serveConfigV2"])
    serve_after = yaml.safe_load(rs_after["spec"]["serveConfigV2"])
    assert _changed(serve_before, serve_after) == {
        ("applications", 0, "args", "prefill_config", "deployment_config", "autoscaling_config", "max_replicas")
    }
    cluster_paths = _changed(rs_before["spec"]["rayClusterConfig"], rs_after["spec"]["rayClusterConfig"])
    prefill = [g["groupName"] for g in rs_before["spec"]["rayClusterConfig"]["workerGroupSpecs"]].index("prefill")
    assert cluster_paths == {("workerGroupSpecs", prefill, "maxReplicas")}
    patterns = wider.one(RAY_SERVICE).options["replaceOnChanges"]
    assert _replaced_by(patterns, ("spec", "rayClusterConfig", "workerGroupSpecs", prefill, "maxReplicas"))


def test_replacement_covers_every_cluster_field_but_the_autoscalers_replica_count(xpyd, dev):
    patterns = xpyd.one(RAY_SERVICE).options["replaceOnChanges"]
    spec = cluster_spec(xpyd)
    assert AUTOSCALER_OWNED_WORKER_FIELDS == ("replicas",)
    assert not _replaced_by(patterns, ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "replicas"))
    # Every other field we render, worker bounds included, reaches a running cluster only through a new one.
    for path in _flatten({"spec": {"rayClusterConfig": spec}}):
        if path[-1] != "replicas":
            assert _replaced_by(patterns, path), path
    # Without KubeRay's autoscaler nothing owns `replicas`, and KubeRay ignores its change: it replaces.
    assert cluster_spec(dev)["enableInTreeAutoscaling"] is False
    dev_patterns = dev.one(RAY_SERVICE).options["replaceOnChanges"]
    assert _replaced_by(dev_patterns, ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "replicas"))
    # A worker group added or removed shows as a new list element, which no field path contains:
    assert _replaced_by(patterns, ("metadata", "annotations", "ray-llm-eks/worker-groups"))
    assert xpyd.one(RAY_SERVICE).inputs["metadata"]["annotations"]["ray-llm-eks/worker-groups"] == "decode,prefill"


def test_pools_that_scale_carry_the_node_template_tags_on_their_asg(plans, xpyd):
    checked = 0
    for plan in [*plans.values(), xpyd]:
        for pool in plan.of_type(MNG):
            if pool.name == "eks-system":
                continue
            sizes = pool.inputs["scalingConfig"]
            tags = {
                t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
                for t in plan.of_type(ASG_TAG)
                if t.inputs["autoscalingGroupName"].startswith(f"<known after deploy: {pool.name} ")
            }
            if sizes["minSize"] == sizes["maxSize"]:
                assert tags == {} and "ignoreScalingChanges" not in pool.inputs
                continue
            checked += 1
            assert pool.inputs["ignoreScalingChanges"] is True  # the autoscaler owns desiredSize
            name = pool.inputs["labels"][POOL_NODE_LABEL]
            assert tags[f"{NODE_TEMPLATE}/label/{POOL_NODE_LABEL}"] == name
            assert tags[f"{NODE_TEMPLATE}/label/nvidia.com/gpu.present"] == "true"
            assert tags[f"{NODE_TEMPLATE}/taint/nvidia.com/gpu"] == "true:NoSchedule"
            (group,) = [g for g in cluster_spec(plan)["workerGroupSpecs"] if g["groupName"] == name]
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            for device in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):  # what the worker asks for, the node offers
                assert tags.get(f"{NODE_TEMPLATE}/resources/{device}") == limits.get(device)
            assert all(not t.inputs["tag"]["propagateAtLaunch"] for t in plan.of_type(ASG_TAG))
    assert checked >= 4  # xpyd's two pools, tp's and dp's


def test_scale_from_zero_pool_is_tagged():
    plan = run_program("xpyd", {NS + "autoscaling": {"decode": {"minReplicas": 0, "maxReplicas": 2}}})
    assert scaling_of(plan, "decode") == ((0, 2), (0, 0, 2), (0, 0, 2))
    keys = {t.inputs["tag"]["key"] for t in plan.of_type(ASG_TAG) if "decode-gpu" in t.inputs["autoscalingGroupName"]}
    assert f"{NODE_TEMPLATE}/resources/nvidia.com/gpu" in keys and f"{NODE_TEMPLATE}/label/{POOL_NODE_LABEL}" in keys


def test_cluster_autoscaler_only_where_a_pool_scales(dev, xpyd):
    assert not dev.of_type("ray-llm-eks:cluster_autoscaler:ClusterAutoscaler")
    (release,) = [r for r in xpyd.of_type("kubernetes:helm.sh/v3:Release") if r.name == "cluster-autoscaler"]
    values = release.inputs["values"]
    assert release.inputs["version"] == "9.59.0"
    assert values["autoDiscovery"] == {"clusterName": "ray-llm-xpyd"}
    assert values["nodeSelector"] == {POOL_NODE_LABEL: "system"}
    assert values["extraArgs"]["skip-nodes-with-local-storage"] == "false"  # Ray workers mount an emptyDir
    association = xpyd.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "cluster-autoscaler-pod-identity")
    assert association.inputs["serviceAccount"] == values["rbac"]["serviceAccount"]["name"]
    assert association.inputs["namespace"] == release.inputs["namespace"] == "kube-system"
    role = xpyd.one("aws:iam/role:Role", "cluster-autoscaler-role")
    assert '"pods.eks.amazonaws.com"' in role.inputs["assumeRolePolicy"]
    assert xpyd.one("aws:eks/addon:Addon", "pod-identity-agent").inputs["addonName"] == "eks-pod-identity-agent"
    waits = xpyd.waits_for(release.urn)
    assert association.urn in waits and xpyd.one(MNG, "eks-system").urn in waits
    # The RayService outlives it on destroy, like the operator.
    assert release.urn in xpyd.waits_for(xpyd.one(RAY_SERVICE).urn)


def test_cluster_autoscaler_resizes_only_this_clusters_groups(xpyd):
    """Only the describe calls are account-wide; resizing needs this cluster's discovery tag key."""
    (policy,) = [r for r in xpyd.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == "cluster-autoscaler-policy"]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    writes = [s for s in statements if "autoscaling:SetDesiredCapacity" in s["Action"]]
    assert writes == [
        {
            "Effect": "Allow",
            "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Resource": "*",
            "Condition": {"Null": {"aws:ResourceTag/k8s.io/cluster-autoscaler/ray-llm-xpyd": "false"}},
        }
    ]
    assert all(
        a.split(":")[1].startswith(("Describe", "Get")) for s in statements if s not in writes for a in s["Action"]
    )


def test_gpu_pods_are_never_evicted_by_the_cluster_autoscaler(xpyd):
    spec = cluster_spec(xpyd)
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
        annotations = dict(template["metadata"]["annotations"])
        annotations.pop("ray-llm-eks/shipped-code")  # the code's digest (tests/unit/domain/serving/test_one_spec.py)
        assert annotations == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_cost_range_counts_every_pool_at_min_desired_and_max(xpyd):
    from ray_llm_eks.domain.platform.prices import EBS_GP3_USD_PER_GB_MONTH, HOURS_PER_MONTH, INSTANCE_USD_PER_HOUR

    usd = xpyd.outputs["hourlyCostRangeUsd"]
    assert usd["min"] == usd["desired"] == xpyd.outputs["estimatedHourlyCostUsd"]  # xpyd starts at its minimum
    # At max: prefill 4 (+2) and decode 2 (+1) g6.8xlarge nodes, each with its 100 GiB root volume.
    extra = 3 * (
        INSTANCE_USD_PER_HOUR["us-east-1"]["g6.8xlarge"] + 100 * EBS_GP3_USD_PER_GB_MONTH["us-east-1"] / HOURS_PER_MONTH
    )
    assert usd["max"] == pytest.approx(usd["desired"] + extra, abs=0.001)


def test_a_second_pool_for_a_role_is_a_stack_change():
    """A decode pool on L40S next to the L4 one: its own node group and worker group, offering the
    decode resource, so Ray places decode replicas on either; no accelerator_type (GPUs differ)."""
    plan = run_program("xpyd", {NS + "gpuPools": SECOND_DECODE_POOL})
    mng = plan.one(MNG, "decode-l40s-gpu").inputs
    assert mng["instanceTypes"] == ["g6e.8xlarge"] and mng["labels"][POOL_NODE_LABEL] == "decode-l40s"
    assert mng["enableEfaSupport"] is True  # it runs a PD role: KV cache over EFA
    groups = {g["groupName"]: g for g in cluster_spec(plan)["workerGroupSpecs"]}
    assert {n: g["resources"] for n, g in groups.items()} == {
        "prefill": {"pool_prefill": "1"},
        "decode": {"pool_decode": "1"},
        "decode-l40s": {"pool_decode": "1"},
    }
    assert groups["decode-l40s"]["template"]["spec"]["nodeSelector"] == {POOL_NODE_LABEL: "decode-l40s"}
    doc = yaml.safe_load(plan.one(RAY_SERVICE).inputs["spec"]["serveConfigV2"])["applications"][0]["args"]
    assert "accelerator_type" not in doc["decode_config"] and doc["prefill_config"]["accelerator_type"] == "L4"
    assert doc["decode_config"]["placement_group_config"]["bundle_per_worker"] == {"GPU": 1, "pool_decode": 1}
