"""What `destroy` waits for, held in the plan (ray_llm_eks/domain/platform/teardown.py): with rocksdb, a resource whose
before- delete hook waits for the CSI driver's volumes sits between the RayService (deleted before it) and the driver,
its
StorageClass and the nodes (deleted after it); with prod's pod security groups, the head's group outlives the
SecurityGroupPolicy and the RayService and its delete retries long enough for the branch ENIs' cooldown."""

from __future__ import annotations

import pytest

from offline.plan import run_program
from ray_llm_eks.domain.platform import teardown
from ray_llm_eks.domain.telemetry.observability import STORAGE_CLASS

NS = "ray-llm-eks:"
STASH = "pulumi:index:Stash"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
STORAGE = "kubernetes:storage.k8s.io/v1:StorageClass"
ADDON = "aws:eks/addon:Addon"
MNG = "eks:index:ManagedNodeGroup"
SG = "aws:ec2/securityGroup:SecurityGroup"
POLICY = "kubernetes:vpcresources.k8s.aws/v1beta1:SecurityGroupPolicy"


@pytest.fixture(scope="module")
def rocksdb():
    return run_program("prod", {NS + "gcsFaultTolerance": "rocksdb"})


def test_rocksdb_plan_waits_for_the_drivers_volumes_between_the_rayservice_and_the_driver(rocksdb):
    plan = rocksdb
    wait = plan.one(STASH, "ebs-csi-volumes-reclaimed")
    assert wait.options["hooks"] == {"before_delete": ["ebs-csi-volumes-reclaimed"]}
    assert wait.inputs["input"] == "[secret]"  # the kubeconfig the hook waits with, a secret in state
    # Deleted after the RayService (its claim) ...
    assert plan.depends_on(plan.one(RAY_SERVICE).urn, wait.urn)
    # ... and before the driver, its StorageClass, the system nodes and every GPU pool.
    addon = next(r for r in plan.of_type(ADDON) if r.name.startswith("ebs-csi"))
    for outliving in (plan.one(STORAGE).urn, addon.urn, *(r.urn for r in plan.of_type(MNG))):
        assert plan.depends_on(wait.urn, outliving), outliving
    assert plan.one(STORAGE).inputs["metadata"]["name"] == STORAGE_CLASS


@pytest.mark.parametrize("stack", ["dev", "prod", "baseline"])
def test_no_wait_where_no_claim_gets_a_driver_volume(plans, stack):
    # Prometheus's volume is in the graph (ray_llm_eks/components/observability.py PrometheusVolume): nothing to wait
    # for.
    assert not plans[stack].of_type(STASH)
    assert not [r for r in plans[stack].registrations if "hooks" in r.options]


def test_prod_head_security_group_outlives_its_pods_and_waits_out_the_branch_eni_cooldown(plans):
    plan = plans["prod"]
    head = plan.one(SG, "gcs-store-head")
    ray_service, policy = plan.one(RAY_SERVICE), plan.one(POLICY)
    assert plan.depends_on(policy.urn, head.urn) and plan.depends_on(ray_service.urn, policy.urn)
    delete = head.options["customTimeouts"]["delete"]
    assert delete == teardown.POD_SECURITY_GROUP_DELETE_TIMEOUT
    # Longer than the provider's own 15 min default and far longer than the controller's cooldown.
    assert teardown.minutes(delete) > 15 > teardown.BRANCH_ENI_COOLDOWN_SECONDS / 60
    # The store's group holds no branch ENI: the provider's default.
    assert "customTimeouts" not in plan.one(SG, "gcs-store-store").options


def test_the_hook_waits_with_the_kubeconfig_its_state_keeps(monkeypatch):
    import asyncio

    import pulumi

    from ray_llm_eks.components import observability

    seen = []
    monkeypatch.setattr(
        observability.teardown, "wait_until_reclaimed_from_kubeconfig", lambda kube, cls: seen.append((kube, cls))
    )

    async def delete(old_outputs):
        await observability._wait_for_reclaim(pulumi.ResourceHookArgs("urn", "id", "w", STASH, old_outputs=old_outputs))

    async def run():
        # The engine hands the state's secret as a secret Output (pulumi/runtime/_callbacks.py outputtify_secrets).
        await delete({"input": pulumi.Output.secret({"kubeconfig": "KUBE", "storageClass": "gp3"})})
        await delete({"output": {"kubeconfig": "FIRST", "storageClass": "gp3"}})
        with pytest.raises(RuntimeError, match="no kubeconfig in its state"):
            await delete({})

    asyncio.run(run())
    assert seen == [("KUBE", "gp3"), ("FIRST", "gp3")]


KEPT = {  # what a stack outside dev protects (type, name): ray_llm_eks/domain/platform/teardown.py keeps_data
    ("eks:index:Cluster", "eks"),
    ("aws:kms/key:Key", "eks-secrets"),
    ("aws:elasticache/replicationGroup:ReplicationGroup", "gcs-store-valkey"),
    ("aws:ebs/volume:Volume", "monitoring-prometheus-volume"),
}
CONTROL_PLANE_LOGS = ("aws:cloudwatch/logGroup:LogGroup", "eks-control-plane-logs")


def _kept(plan) -> tuple[set, set]:
    protected = {(r.type, r.name) for r in plan.registrations if r.options.get("protect")}
    retained = {(r.type, r.name) for r in plan.registrations if r.options.get("retainOnDelete")}
    return protected, retained


def test_prod_protects_what_holds_data_and_keeps_its_audit_logs(plans):
    """`destroy` of prod refuses while the cluster, its key, the GCS store and Prometheus's volume are protected,
    and leaves the control plane's log group in CloudWatch."""
    protected, retained = _kept(plans["prod"])
    assert protected == KEPT
    assert retained == {CONTROL_PLANE_LOGS}


def test_dev_stacks_stay_easy_to_destroy(plans):
    for stack, plan in plans.items():
        if stack != "prod":  # every other shipped stack is environment dev
            assert _kept(plan) == (set(), set()), stack
