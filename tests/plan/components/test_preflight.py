"""Preflight in the program: every stack fits and prints its fit and cost, a mistake stops it before any
resource, and the deploy-time checks ask AWS (its answers mocked). The rules themselves, called
directly: tests/unit/domain/checks/test_preflight_rules.py."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from offline.mocks import PlanMocks, RecordingMonitor
from offline.plan import run_program
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.checks import preflight
from ray_llm_eks.domain.platform import aws_facts, prices
from ray_llm_eks.domain.serving import fit_prediction, model_table
from ray_llm_eks.domain.serving.fit_prediction import Engine
from ray_llm_eks.domain.serving.serve_app import parse_document
from tests.conftest import SHIPPED_STACKS, failing_run

NS = "ray-llm-eks:"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# Llama 3.1 is gated on Hugging Face: a stack serving it must set hfToken.
LLAMA = {NS + "modelId": LLAMA_8B, NS + "hfToken": SecretValue("hf_test")}
L4 = aws_facts.INSTANCE_SPECS["g6.8xlarge"]


# ---- Model fit


def test_every_stack_fits(plans):
    """Every stack (the shipped ones and any a user adds) got past the fit check (else it would
    have no RayService)."""
    assert set(plans) >= SHIPPED_STACKS
    for plan in plans.values():
        assert plan.one("kubernetes:ray.io/v1:RayService")


def test_dev_renders_the_largest_max_num_seqs_and_plan_prints_the_fit(plans):
    """Qwen3.5-9B is hybrid: vLLM's default 256 sequences cannot start on an L4; the stack renders the
    largest that fits, and make plan prints the expected KV tokens and concurrency per role."""
    plan = plans["dev"]
    document = yaml.safe_load(plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveConfigV2"])
    seqs = fit_prediction.largest_max_num_seqs(
        model_table.KNOWN_MODELS["Qwen/Qwen3.5-9B"], Engine(4096, 1, 1, 0.92, "auto", 2048, True), L4
    )
    assert {role: c["engine_kwargs"]["max_num_seqs"] for role, c in parse_document(document, "x").roles.items()} == {
        "prefill": seqs,
        "decode": seqs,
    }
    summary = plan.summary()
    for role in ("prefill", "decode"):
        line = next(line for line in summary.splitlines() if line.strip().startswith(f"{role} (g6.8xlarge"))
        assert f"max_num_seqs {seqs}" in line and re.search(r"[\d,]+ tokens, [\d.]+x concurrency at 4,096 tokens", line)
        assert re.search(r"; \d+ of the \d+ Mamba blocks \([\d.]+ GiB\) above max_num_seqs: the margin", line)


def test_a_stack_asking_64_sequences_gets_them():
    plan = run_program("dev", {NS + "maxNumSeqs": 64})
    document = yaml.safe_load(plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveConfigV2"])
    assert {c["engine_kwargs"]["max_num_seqs"] for c in parse_document(document, "x").roles.values()} == {64}
    # vLLM logged 86 blocks at 64 sequences on a cold start; the fit's line through the cold starts says 85
    # (within its tolerance of 6 blocks).
    assert "max_num_seqs 64, CUDA graphs) + KV cache 1.37 GiB -> 85 blocks of 528 tokens" in plan.summary()


def test_gated_model_without_token_fails_at_deploy():
    error, monitor = failing_run({NS + "modelId": LLAMA_8B, NS + "maxModelLen": 8192}, offline_plan=False)
    assert "hfToken" in str(error) and f"{LLAMA_8B} is gated" in str(error) and monitor.registrations == []


# ---- Deploy-time checks, with AWS's answers mocked


class CannedAws(PlanMocks):
    """AWS data sources answered with fixed data instead of 'no answer'."""

    def __init__(
        self,
        offerings: dict[str, list[str]],
        quotas: dict[str, float],
        clusters: tuple[str, ...] = (),
        caller: str = "arn:aws:sts::123456789012:assumed-role/platform/alice",
        ebs_encrypted: bool = True,
        described: dict | None = None,
    ):
        super().__init__()
        self.offerings, self.quotas, self.clusters, self.caller = offerings, quotas, clusters, caller
        self.ebs_encrypted = ebs_encrypted
        self.described = described or {}  # instance type -> getInstanceType fields over c7i.large's

    def call(self, args):
        if args.token == "aws:ebs/getEncryptionByDefault:getEncryptionByDefault":
            return {"id": "us-east-1", "enabled": self.ebs_encrypted}
        if args.token == "aws:eks/getClusters:getClusters":
            return {"id": "us-east-1", "names": list(self.clusters)}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"id": "123456789012", "accountId": "123456789012", "arn": self.caller, "userId": "AROA:alice"}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
            return {"id": "us-east-1", "names": zones, "zoneIds": ["use1-az1", "use1-az2", "use1-az4"]}
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted = args.args["filters"][0]["values"]
            pairs = [(t, z) for t, zones in self.offerings.items() if t in wanted for z in zones]
            return {
                "id": "us-east-1",
                "instanceTypes": [t for t, _ in pairs],
                "locations": [z for _, z in pairs],
                "locationTypes": ["availability-zone"] * len(pairs),
            }
        if args.token == "aws:ec2/getInstanceType:getInstanceType":  # c7i.large: 2 vCPU, 4 GiB, 3 ENIs x 10 IPs
            return {
                "id": args.args["instanceType"],
                "instanceType": args.args["instanceType"],
                "defaultVcpus": 2,
                "memorySize": 4096,
                "maximumNetworkInterfaces": 3,
                "maximumIpv4AddressesPerInterface": 10,
            } | self.described.get(args.args["instanceType"], {})
        if args.token == "aws:servicequotas/getServiceQuota:getServiceQuota":
            return {
                "id": args.args["quotaCode"],
                "serviceCode": "ec2",
                "quotaCode": args.args["quotaCode"],
                "value": self.quotas[args.args["quotaCode"]],
            }
        return super().call(args)


EVERYWHERE = {"g6.8xlarge": ["us-east-1a", "us-east-1b"], "m7i.xlarge": ["us-east-1a", "us-east-1b"]}
ROOMY = {"L-DB2E81BA": 128.0, "L-1216C47A": 64.0}


def aws_run(offerings, quotas, stack="dev", overrides=None, **answers):
    monitor = RecordingMonitor(CannedAws(offerings, quotas, **answers))
    return monitor, lambda: run_program(stack, overrides, monitor=monitor)


def test_checks_pass_when_aws_says_yes():
    _, run = aws_run(EVERYWHERE, ROOMY)
    checks = run().outputs["preflightChecks"]
    assert checks[0] == "ok: Kubernetes 1.35 is in standard support until 2027-03-27"
    assert checks[2] == "ok: zones ['us-east-1a', 'us-east-1b'] are available in us-east-1"
    assert checks[3].startswith("ok: instance types")
    assert "ok: Running On-Demand G and VT instances (L-DB2E81BA) 64 <= 128 vCPUs" in " ".join(checks)
    assert not any("deferred" in line for line in checks)


def test_gpu_quota_too_small_fails_with_name_need_and_limit():
    monitor, run = aws_run(EVERYWHERE, {**ROOMY, "L-DB2E81BA": 32.0})
    with pytest.raises(preflight.PreflightError) as caught:
        run()
    message = str(caught.value)
    assert message.startswith("invalid config ray-llm-eks:gpuPools.") and ".maxSize = " in message
    assert "EC2 quota L-DB2E81BA (Running On-Demand G and VT instances) in us-east-1, 32 vCPUs" in message
    assert "need up to 64" in message
    assert monitor.registrations == []


def test_system_quota_counts_max_size():
    _, run = aws_run(EVERYWHERE, {**ROOMY, "L-1216C47A": 4.0})
    with pytest.raises(
        preflight.PreflightError,
        match=r"systemNodes\.maxSize = 2: .*L-1216C47A .*, 4 vCPUs: .* need up to 8 .*systemNodes 2 x",
    ):
        run()


def test_gpu_type_not_offered_in_the_gpu_zone_fails():
    monitor, run = aws_run({**EVERYWHERE, "g6.8xlarge": ["us-east-1b", "us-east-1c"]}, ROOMY)
    with pytest.raises(preflight.PreflightError) as caught:
        run()
    message = str(caught.value)
    # the first pool by name
    assert "gpuPools.decode.instanceType = g6.8xlarge: a type offered in [us-east-1a] of us-east-1" in message
    assert "zones offering it: [us-east-1b, us-east-1c]" in message
    assert monitor.registrations == []


def test_zone_that_does_not_exist_fails():
    monitor = RecordingMonitor(CannedAws(EVERYWHERE, ROOMY))
    overrides = {NS + "availabilityZones": ["us-east-1a", "us-east-1z"]}
    with pytest.raises(
        preflight.PreflightError,
        match=r"availabilityZones = \[us-east-1z\]: zones available to this account in us-east-1",
    ):
        run_program("dev", overrides, monitor=monitor)
    assert monitor.registrations == []


def test_system_type_outside_our_table_is_sized_from_aws():
    monitor = RecordingMonitor(CannedAws({**EVERYWHERE, "c7i.large": ["us-east-1a"]}, ROOMY))
    # 2000m - 70m kube-reserved; 4096 MiB x 92.5% - (11 x (3 x 9 + 2) + 255) - 100 eviction.
    with pytest.raises(
        preflight.PreflightError,
        match=r"systemNodes\.instanceType = c7i\.large: a type with room .* offers 1930m / 3114 MiB",
    ):
        run_program("dev", {NS + "systemNodes": {"instanceType": "c7i.large"}}, monitor=monitor)
    assert monitor.registrations == []


# g5.2xlarge as EC2 DescribeInstanceTypes gives it: 8 vCPUs, 32 GiB, one A10G of 24 GiB, 450 GB NVMe, no EFA.
G5_2XLARGE = {
    "defaultVcpus": 8,
    "memorySize": 32768,
    "gpuses": [{"count": 1, "manufacturer": "NVIDIA", "memorySize": 24576, "name": "A10G"}],
    "totalInstanceStorage": 450,
    "efaSupported": False,
}
OWN_G5 = {"gpuModel": "A10G", "gpus": 1, "gpuMemoryMiB": 24576, "vcpus": 8, "memoryGiB": 32, "nvmeGb": 450}


def _baseline_on_g5(**fields) -> dict:
    return {
        NS + "gpuPools": {"collocated": {"instanceType": "g5.2xlarge"}},
        NS + "instanceTypes": {"g5.2xlarge": {**OWN_G5, **fields}},
    }


def test_a_type_the_stack_describes_is_held_against_ec2s_description_at_deploy():
    offered = {"g5.2xlarge": ["us-east-1a"], "m7i.xlarge": ["us-east-1a", "us-east-1b"]}
    monitor = RecordingMonitor(CannedAws(offered, ROOMY, described={"g5.2xlarge": G5_2XLARGE}))
    checks = run_program("baseline", _baseline_on_g5(), monitor=monitor).outputs["preflightChecks"]
    assert "ok: instanceTypes.g5.2xlarge is as EC2 describes it" in checks
    monitor = RecordingMonitor(CannedAws(offered, ROOMY, described={"g5.2xlarge": G5_2XLARGE}))
    with pytest.raises(preflight.PreflightError) as caught:
        run_program("baseline", _baseline_on_g5(vcpus=16), monitor=monitor)
    assert str(caught.value).startswith(
        "invalid config ray-llm-eks:instanceTypes.g5.2xlarge.vcpus = 16: 8, as EC2 describes g5.2xlarge"
    )
    assert monitor.registrations == []


def test_offline_plan_defers_rather_than_passes(dev):
    checks = dev.outputs["preflightChecks"]
    offline = [line for line in checks if not line.startswith("deferred to deploy time")]
    assert offline == [  # from our own tables and the stack file, no AWS needed
        "ok: Kubernetes 1.35 is in standard support until 2027-03-27",
        "ok: only the identity that creates the cluster is admin (clusterAdmins is empty)",
        "ok: the Ray head and system pods fit one m7i.xlarge",
    ]
    assert len(checks) == 8


# ---- The Kubernetes version calendar: refuse a new cluster, warn a running one


OLD_VERSION = {NS + "kubernetesVersion": "1.34"}  # standard support ends 2026-12-02, after the suite's pinned day


def test_new_cluster_on_a_version_leaving_support_is_refused():
    monitor, run = aws_run(EVERYWHERE, ROOMY, overrides=OLD_VERSION)
    with pytest.raises(
        preflight.PreflightError, match=r"kubernetesVersion = '1\.34': .*standard support of 1\.34 ends 2026-12-02"
    ):
        run()
    assert monitor.registrations == []


def test_running_cluster_on_a_version_leaving_support_is_warned_and_deploys():
    _, run = aws_run(EVERYWHERE, ROOMY, overrides=OLD_VERSION, clusters=("other", "ray-llm-dev"))
    plan = run()
    assert plan.outputs["preflightChecks"][0].startswith(
        "warning: cluster ray-llm-dev runs Kubernetes 1.34, standard support ends 2026-12-02"
    )
    assert plan.one("eks:index:Cluster").inputs["version"] == "1.34"


def test_offline_plan_warns_about_a_version_leaving_support():
    plan = run_program("dev", OLD_VERSION)
    assert plan.outputs["preflightChecks"][0].startswith(
        "warning: Kubernetes 1.34 leaves standard support on 2026-12-02"
    )


def test_calendar_boundary(monkeypatch):
    """1.35 ends 2027-03-27: a new cluster needs more than 30 days left."""
    _, run = aws_run(EVERYWHERE, ROOMY)
    monkeypatch.setenv("RAY_LLM_EKS_TODAY", "2027-02-24")  # 31 days left
    assert run().outputs["preflightChecks"][0].startswith("ok: Kubernetes 1.35")
    monkeypatch.setenv("RAY_LLM_EKS_TODAY", "2027-02-25")  # 30 days left
    with pytest.raises(preflight.PreflightError, match=re.escape("one of ['1.36'] for a new cluster")):
        aws_run(EVERYWHERE, ROOMY)[1]()


# ---- Who may reach the Kubernetes API


def test_listing_the_deploying_identity_as_admin_is_refused():
    admins = {NS + "clusterAdmins": ["arn:aws:iam::123456789012:role/team/platform"]}
    monitor, run = aws_run(EVERYWHERE, ROOMY, overrides=admins)
    with pytest.raises(
        preflight.PreflightError,
        match=r"clusterAdmins = .*: principals other than arn:aws:iam::123456789012:role/platform",
    ):
        run()
    assert monitor.registrations == []
    _, run = aws_run(EVERYWHERE, ROOMY, overrides=admins, caller="arn:aws:sts::123456789012:assumed-role/ci/run-7")
    assert "ok: clusterAdmins" in run().outputs["preflightChecks"][1]


# ---- Cost


def test_every_stack_prints_an_hourly_cost_or_says_what_is_missing(plans):
    """A complete total where the price table covers the stack's region and types (every shipped
    stack); else the table names each missing price instead of guessing one."""
    for plan in plans.values():
        estimate = plan.outputs["costEstimate"]
        if plan.stack in SHIPPED_STACKS or estimate["region"] in prices.COMPLETE_REGIONS:
            assert isinstance(plan.outputs["estimatedHourlyCostUsd"], float), plan.stack
            assert re.search(r"total: [\d.]+ \$/h", plan.summary())
        elif estimate["unknownPrices"]:
            assert f"missing prices: {', '.join(estimate['unknownPrices'])}" in plan.summary()


def test_bad_prices_fail_before_any_resource():
    """The wiring every config rule relies on: a bad value stops the program before it declares anything."""
    error, monitor = failing_run({NS + "prices": {"instances": {"g6.8xlarge": "cheap"}}})
    assert "prices.instances.g6.8xlarge" in str(error) and monitor.registrations == []


# ---- Weights from S3: the fast path after a node replacement


def manifest_spec(plan) -> dict:
    return plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]


WEIGHTS = {NS + "modelSource": "s3://acme-models/qwen3.5-9b/"}


def test_weights_in_s3_give_the_workers_service_account_read_access_to_that_prefix_only():
    plan = run_program("dev", WEIGHTS)
    configs = parse_document(yaml.safe_load(manifest_spec(plan)["serveConfigV2"]), "dev").roles
    assert {c["model_loading_config"]["model_source"] for c in configs.values()} == {WEIGHTS[NS + "modelSource"]}
    assert {c["model_loading_config"]["model_id"] for c in configs.values()} == {"Qwen/Qwen3.5-9B"}
    (policy,) = [p for p in plan.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("weights")]
    assert policy.inputs["role"] == "<known after deploy: aws:iam/role:Role::weights-role.name>"  # not the node role
    role = plan.one("aws:iam/role:Role", "weights-role")
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"
    }
    association = plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "weights-pod-identity")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == ("llm", "ray-weights")
    assert plan.depends_on(association.urn, plan.one("aws:eks/addon:Addon", "pod-identity-agent").urn)
    account = plan.one("kubernetes:core/v1:ServiceAccount", "llm-ray-weights")
    assert account.inputs["automountServiceAccountToken"] is False
    for group in manifest_spec(plan)["rayClusterConfig"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        assert pod["serviceAccountName"] == "ray-weights" and pod["automountServiceAccountToken"] is False
        assert {"name": "AWS_REGION", "value": "us-east-1"} in pod["containers"][0]["env"]
    rayservice = plan.one("kubernetes:ray.io/v1:RayService").urn
    assert plan.depends_on(rayservice, association.urn) and plan.depends_on(rayservice, account.urn)
    on_node_role = [
        r.name for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if "Role::eks-node-role." in r.inputs["role"]
    ]
    assert on_node_role == ["eks-node-role-session-manager"]  # no S3 there
    names = {p.name for p in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert "llm-network-policies-egress-except-instance-metadata" in names
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert statements == [
        {
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::acme-models",
            "Condition": {"StringLike": {"s3:prefix": ["qwen3.5-9b/*"]}},
        },
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::acme-models/qwen3.5-9b/*"},
    ]
    assert plan.depends_on(plan.one("kubernetes:ray.io/v1:RayService").urn, policy.urn)
    assert "deferred to deploy time: bucket acme-models" in " ".join(plan.outputs["preflightChecks"])
    hub = run_program("dev")
    assert [p for p in hub.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("weights")] == []
    assert hub.of_type("kubernetes:core/v1:ServiceAccount") == []


class BucketElsewhere(CannedAws):
    def call(self, args):
        if args.token == "aws:s3/getBucket:getBucket":
            return {"id": args.args["bucket"], "bucket": args.args["bucket"], "bucketRegion": "eu-west-1"}
        return super().call(args)


def test_weights_bucket_in_another_region_is_refused():
    monitor = RecordingMonitor(BucketElsewhere(EVERYWHERE, ROOMY))
    with pytest.raises(
        preflight.PreflightError,
        match=r"modelSource = s3://acme-models/.*: a bucket in us-east-1, the stack.s region \(acme-models is in eu-",
    ):
        run_program("dev", WEIGHTS, monitor=monitor)
    assert monitor.registrations == []
