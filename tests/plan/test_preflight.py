"""Preflight: a model that cannot fit, or more GPUs than the account may run, is refused in
seconds; and what the stack costs per hour."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from adapters.stackfile import ROOT, SecretValue
from domain import aws_facts, model_fit, preflight, prices
from domain.errors import ConfigError
from domain.model_fit import GIB, Engine, check_role, predict
from domain.serve_config import llm_configs_by_role
from offline.mocks import PlanMocks, RecordingMonitor
from offline.plan import run_program
from tests.conftest import SHIPPED_STACKS, failing_run, region_overrides

NS = "ray-llm-eks:"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# Llama 3.1 is gated on Hugging Face: a stack serving it must set hfToken.
LLAMA = {NS + "modelId": LLAMA_8B, NS + "hfToken": SecretValue("hf_test")}
L4 = aws_facts.INSTANCE_SPECS["g6.8xlarge"]


# ---- Model fit


def test_70b_on_dev_fails_saying_by_how_much_and_what_would_fit():
    error, monitor = failing_run(
        {NS + "modelId": "meta-llama/Llama-3.1-70B-Instruct", NS + "hfToken": SecretValue("t")}
    )
    message = str(error)
    assert isinstance(error, ConfigError) and monitor.registrations == []
    assert "gpuPools.prefill = 'g6.8xlarge'" in message and "does not fit" in message
    short = float(re.search(r"short by ([\d.]+) GiB", message).group(1))
    assert short > 100  # 131.5 GiB of bf16 weights against ~20.6 GiB usable on one L4
    assert "tensor_parallel_size" in message


def test_llama_8b_at_full_context_fails_and_the_suggested_length_fits():
    error, _ = failing_run({**LLAMA, NS + "maxModelLen": 131072})
    message = str(error)
    # vLLM's reason: 8192 blocks of 16 tokens x 32 layers x 4 KiB = 16 GiB, 128 KiB/token x 131072
    assert (
        "To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is needed" in message
    )
    assert "g6e.8xlarge" in message  # an L40S (48 GB) holds it at the same parallelism
    suggested = int(re.search(r"max_model_len <= (\d+)", message).group(1))
    run_program("dev", {**LLAMA, NS + "maxModelLen": suggested})  # the edge: fits
    error, _ = failing_run({**LLAMA, NS + "maxModelLen": suggested + 16})
    assert "does not fit" in str(error)


def test_llama_8b_at_8192_fits_dev():
    plan = run_program("dev", {**LLAMA, NS + "maxModelLen": 8192})
    assert plan.one("kubernetes:ray.io/v1:RayService")


def test_every_stack_fits(plans):
    """Every stack (the shipped ones and any a user adds) got past the fit check (else it would
    have no RayService)."""
    assert set(plans) >= SHIPPED_STACKS
    for plan in plans.values():
        assert plan.one("kubernetes:ray.io/v1:RayService")


def test_qwen35_weights_and_budget_are_the_hand_arithmetic():
    """Qwen3.5-9B on one L4, bf16, language_model_only: weights = the text model's 8,953,803,264
    parameters x 2 B (16.68 GiB; no vision tower, no MTP head) + what vLLM measured beyond them
    (16.80 GiB logged); 22888 MiB x 0.92 usable; KV 2 x 8 layers x 4 heads x 256 x 2 B = 32 KiB/token."""
    spec = model_fit.KNOWN_MODELS["Qwen/Qwen3.5-9B"]
    assert spec.kv_bytes_per_token(2) == 32 * 1024
    assert spec.loaded_parameters(True) * 2 == pytest.approx(8_953_803_264 * 2, rel=1e-6)
    assert spec.loaded_parameters(False) == pytest.approx(9_653_108_208 - 243_290_624, rel=1e-6), "MTP never loads"
    p = predict(spec, Engine(4096, 1, 1, 0.92, "auto", 2048, language_model_only=True), L4)
    assert round(p.weights / GIB, 2) == 16.80
    assert p.budget == pytest.approx(22888 * 1024**2 * 0.92)
    with_vision = predict(spec, Engine(4096, 1, 1, 0.92, "auto", 2048), L4)
    assert with_vision.weights - p.weights == pytest.approx(456_010_480 * 2, rel=1e-6)


def test_reserve_grows_with_batch_and_parallelism():
    """A model without measurements of its own: 2 GiB at vLLM's default 256 sequences and <= 2048
    batched tokens, +1 GiB above, +1.8 GiB on several GPUs, +1.2 MiB per sequence beyond 256."""
    spec = model_fit.KNOWN_MODELS[LLAMA_8B]
    l4, h100 = aws_facts.INSTANCE_SPECS["g6.8xlarge"], aws_facts.INSTANCE_SPECS["p5.48xlarge"]
    reserve = lambda engine, gpu=l4: model_fit.reserve_gib(spec, engine.on(gpu))  # noqa: E731
    assert reserve(Engine(4096, 1, 1, 0.9, "auto", 2048)) == 2.0
    assert reserve(Engine(4096, 1, 1, 0.9, "auto", 8192)) == 3.0
    assert reserve(Engine(4096, 2, 1, 0.9, "auto", 2048)) == pytest.approx(3.8)
    # An unset batch is vLLM's default for the GPU: 2048 tokens and 256 sequences on an L4; 8192 and
    # 1024 on an 80 GB H100 (engine/arg_utils.py get_batch_defaults).
    assert reserve(Engine(4096, 1, 1, 0.9, "auto")) == 2.0
    assert reserve(Engine(4096, 1, 1, 0.9, "auto"), h100) == pytest.approx(3.0 + 768 * 1.2 / 1024)


def test_tensor_parallel_splits_weights_and_kv_heads():
    spec = model_fit.KNOWN_MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    one, eight = (predict(spec, Engine(8192, tp, 1, 0.9, "auto"), L4) for tp in (1, 8))
    assert eight.weights == pytest.approx(one.weights / 8)
    assert eight.layout.page_bytes * 8 == one.layout.page_bytes
    sixteen = predict(spec, Engine(8192, 16, 1, 0.9, "auto"), L4)
    assert sixteen.layout.page_bytes == eight.layout.page_bytes, "8 KV heads: beyond TP 8 each GPU holds one head"
    fp8 = predict(spec, Engine(8192, 8, 1, 0.9, "fp8"), L4)
    assert fp8.layout.page_bytes * 2 == eight.layout.page_bytes


def test_dev_renders_the_largest_max_num_seqs_and_plan_prints_the_fit(plans):
    """Qwen3.5-9B is hybrid: vLLM's default 256 sequences cannot start on an L4; the stack renders the
    largest that fits, and make plan prints the expected KV tokens and concurrency per role."""
    plan = plans["dev"]
    document = yaml.safe_load(plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveConfigV2"])
    seqs = model_fit.largest_max_num_seqs(
        model_fit.KNOWN_MODELS["Qwen/Qwen3.5-9B"], Engine(4096, 1, 1, 0.92, "auto", 2048, True), L4
    )
    assert {role: c["engine_kwargs"]["max_num_seqs"] for role, c in llm_configs_by_role(document, "x").items()} == {
        "prefill": seqs,
        "decode": seqs,
    }
    summary = plan.summary()
    for role in ("prefill", "decode"):
        line = next(line for line in summary.splitlines() if line.strip().startswith(f"{role} (g6.8xlarge"))
        assert f"max_num_seqs {seqs}" in line and re.search(r"[\d,]+ tokens, [\d.]+x concurrency at 4,096 tokens", line)


def test_a_stack_asking_256_sequences_of_qwen35_on_an_l4_fails_in_one_line():
    error, monitor = failing_run({NS + "maxNumSeqs": 256})
    message = str(error)
    assert isinstance(error, ConfigError) and monitor.registrations == [] and "\n" not in message
    assert message.startswith("invalid config ray-llm-eks:maxNumSeqs = 256: prefill engine_kwargs.max_num_seqs: 256")
    assert "vLLM 0.26.0 would refuse to start: 'max_num_seqs (256) exceeds available Mamba cache blocks (72)" in message
    error, _ = failing_run({NS + "maxNumSeqs": 0})
    assert "maxNumSeqs = '0': a whole number of sequences per engine, 1 or more" in str(error)


def test_a_stack_asking_64_sequences_gets_them():
    plan = run_program("dev", {NS + "maxNumSeqs": 64})
    document = yaml.safe_load(plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveConfigV2"])
    assert {c["engine_kwargs"]["max_num_seqs"] for c in llm_configs_by_role(document, "x").values()} == {64}
    assert "86 blocks of 528 tokens" in plan.summary()


def test_gated_model_without_token_fails_at_deploy():
    error, monitor = failing_run({NS + "modelId": LLAMA_8B, NS + "maxModelLen": 8192}, offline_plan=False)
    assert "hfToken" in str(error) and f"{LLAMA_8B} is gated" in str(error) and monitor.registrations == []


def collocated_llama(engine_kwargs: dict) -> dict:
    """A rendered collocated serve document for Llama-3.1-8B with these engine arguments."""
    llm = {"model_loading_config": {"model_id": LLAMA_8B}, "engine_kwargs": engine_kwargs}
    return {"applications": [{"import_path": "ray.serve.llm:build_openai_app", "args": {"llm_configs": [llm]}}]}


def test_unset_max_model_len_means_the_whole_context():
    spec = model_fit.KNOWN_MODELS[LLAMA_8B]
    document = collocated_llama({"max_num_batched_tokens": 2048})
    with pytest.raises(ConfigError, match=rf"one request with the model's max seq len \({spec.max_context}\)"):
        model_fit.check_fit(document, {"collocated": "g6.8xlarge"}, set(), None)


def test_context_beyond_the_model_fails():
    error, _ = failing_run({**LLAMA, NS + "maxModelLen": 200000})
    assert "maxModelLen = 200000" in str(error) and "at most 131072" in str(error)


def test_tensor_parallel_wider_than_the_instance_fails():
    spec = model_fit.KNOWN_MODELS[LLAMA_8B]
    with pytest.raises(ConfigError, match="an instance with >= 2 GPUs"):
        check_role("decode", LLAMA_8B, spec, Engine(4096, 2, 1, 0.9, "auto"), "g6.8xlarge", need_efa=True)


def test_unknown_model_needs_its_facts():
    error, _ = failing_run({NS + "modelId": "acme/secret-13b"})
    assert "modelSpec" in str(error) and "acme/secret-13b" in str(error)
    facts = {
        "parameters": 13e9,
        "weightDtype": "bfloat16",
        "kvLayers": 40,
        "kvHeads": 8,
        "headDim": 128,
        "stateMiBPerSequence": 0,
        "maxContext": 32768,
    }
    error, _ = failing_run({NS + "modelId": "acme/secret-13b", NS + "modelSpec": facts})
    assert "acme/secret-13b does not fit" in str(error)  # 24.2 GiB of weights > one L4
    plan = run_program("dev", {NS + "modelId": "acme/secret-3b", NS + "modelSpec": {**facts, "parameters": 3e9}})
    assert plan.one("kubernetes:ray.io/v1:RayService")
    error, _ = failing_run({NS + "modelId": "acme/x", NS + "modelSpec": {**facts, "kvHead": 8}})
    assert "modelSpec.kvHead" in str(error) and "unknown field" in str(error)


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
    ):
        super().__init__()
        self.offerings, self.quotas, self.clusters, self.caller = offerings, quotas, clusters, caller
        self.ebs_encrypted = ebs_encrypted

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
            }
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
    assert "L-DB2E81BA 'Running On-Demand G and VT instances'" in message
    assert "is 32 vCPUs" in message and "need up to 64" in message
    assert monitor.registrations == []


def test_system_quota_counts_max_size():
    _, run = aws_run(EVERYWHERE, {**ROOMY, "L-1216C47A": 4.0})
    with pytest.raises(preflight.PreflightError, match=r"L-1216C47A .* is 4 vCPUs; .* need up to 8 .*systemNodes 2 x"):
        run()


def test_gpu_type_not_offered_in_the_gpu_zone_fails():
    monitor, run = aws_run({**EVERYWHERE, "g6.8xlarge": ["us-east-1b", "us-east-1c"]}, ROOMY)
    with pytest.raises(preflight.PreflightError) as caught:
        run()
    message = str(caught.value)
    assert "gpuPools.prefill.instanceType g6.8xlarge is not offered in ['us-east-1a']" in message
    assert "['us-east-1b', 'us-east-1c']" in message
    assert monitor.registrations == []


def test_zone_that_does_not_exist_fails():
    monitor = RecordingMonitor(CannedAws(EVERYWHERE, ROOMY))
    overrides = {NS + "availabilityZones": ["us-east-1a", "us-east-1z"]}
    with pytest.raises(preflight.PreflightError, match=r"\['us-east-1z'\] are not available zones of us-east-1"):
        run_program("dev", overrides, monitor=monitor)
    assert monitor.registrations == []


def test_system_type_outside_our_table_is_sized_from_aws():
    monitor = RecordingMonitor(CannedAws({**EVERYWHERE, "c7i.large": ["us-east-1a"]}, ROOMY))
    # 2000m - 70m kube-reserved; 4096 MiB x 92.5% - (11 x (3 x 9 + 2) + 255) - 100 eviction.
    with pytest.raises(preflight.PreflightError, match=r"c7i.large is too small .* offers 1930m / 3114 MiB"):
        run_program("dev", {NS + "systemNodes": {"instanceType": "c7i.large"}}, monitor=monitor)
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


OLD_VERSION = {NS + "kubernetesVersion": "1.34"}  # standard support ends 2026-12-02; tests run on 2026-11-30


def test_new_cluster_on_a_version_leaving_support_is_refused():
    monitor, run = aws_run(EVERYWHERE, ROOMY, overrides=OLD_VERSION)
    with pytest.raises(preflight.PreflightError, match=r"kubernetesVersion 1.34: standard support ends 2026-12-02"):
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
    with pytest.raises(preflight.PreflightError, match=re.escape("Choose one of ['1.36']")):
        aws_run(EVERYWHERE, ROOMY)[1]()


# ---- Who may reach the Kubernetes API


def test_listing_the_deploying_identity_as_admin_is_refused():
    admins = {NS + "clusterAdmins": ["arn:aws:iam::123456789012:role/team/platform"]}
    monitor, run = aws_run(EVERYWHERE, ROOMY, overrides=admins)
    with pytest.raises(preflight.PreflightError, match=r"clusterAdmins lists arn:aws:iam::123456789012:role/platform"):
        run()
    assert monitor.registrations == []
    _, run = aws_run(EVERYWHERE, ROOMY, overrides=admins, caller="arn:aws:sts::123456789012:assumed-role/ci/run-7")
    assert "ok: clusterAdmins" in run().outputs["preflightChecks"][1]


def test_quota_families():
    assert preflight.quota_for("g6.8xlarge") == preflight.G_AND_VT
    assert preflight.quota_for("p5.48xlarge") == preflight.P_INSTANCES
    assert preflight.quota_for("m7i.xlarge") == preflight.STANDARD
    assert preflight.quota_for("inf2.xlarge") is None


# ---- Cost


def test_dev_cost_is_two_gpu_nodes_a_system_node_eks_and_a_nat(dev):
    # us-east-1 on-demand (AWS price list, 2026): g6.8xlarge 2.0144, m7i.xlarge 0.2016, EKS 0.10,
    # NAT gateway 0.045 per hour.
    reference = 2 * 2.0144 + 0.2016 + 0.10 + 0.045
    estimated = dev.outputs["estimatedHourlyCostUsd"]
    assert abs(estimated - reference) / reference < 0.10
    assert estimated == dev.outputs["costEstimate"]["usdPerHour"]


def test_every_stack_prints_an_hourly_cost_or_says_what_is_missing(plans):
    """A complete total where the price table covers the stack's region and types (every shipped
    stack); else the table names each missing price instead of guessing one."""
    for plan in plans.values():
        estimate = plan.outputs["costEstimate"]
        if plan.stack in SHIPPED_STACKS or estimate["region"] in prices.COMPLETE_REGIONS:
            assert isinstance(plan.outputs["estimatedHourlyCostUsd"], float), plan.stack
            assert re.search(r"total: [\d.]+ \$/h", plan.summary())
        elif estimate["unknownPrices"]:
            assert f"total: unknown, no price for {', '.join(estimate['unknownPrices'])}" in plan.summary()


def test_complete_regions_price_every_instance_type_we_know():
    for region in prices.COMPLETE_REGIONS:
        table = prices.INSTANCE_USD_PER_HOUR[region]
        assert [t for t in aws_facts.INSTANCE_SPECS if t not in table] == [], region
        assert region in prices.NAT_GATEWAY_USD_PER_HOUR and region in prices.EBS_GP3_USD_PER_GB_MONTH
        assert region in prices.PRICES_AS_OF
    doc = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.search(r"complete prices for ([^.]*)\.", doc).group(1)
    assert sorted(re.findall(r"`([a-z]{2}-[a-z]+-\d)`", listed)) == sorted(prices.COMPLETE_REGIONS)


def test_prod_pays_for_a_nat_per_zone(plans):
    lines = {line["item"]: line for line in plans["prod"].outputs["costEstimate"]["lines"]}
    assert lines["NAT gateways"]["quantity"] == 3
    assert lines["prefill nodes g6.8xlarge"]["quantity"] == 2


def test_unknown_prices_are_said_not_guessed():
    plan = run_program("dev", region_overrides("eu-south-2"))
    estimate = plan.outputs["costEstimate"]
    assert plan.outputs["estimatedHourlyCostUsd"] is None and estimate["usdPerHour"] is None
    assert "prefill nodes g6.8xlarge" in estimate["unknownPrices"]
    assert "total: unknown" in plan.summary()


def test_stack_prices_override_the_table():
    plan = run_program("dev", {NS + "prices": {"instances": {"g6.8xlarge": 1.0}, "natGatewayPerHour": 0.05}})
    lines = {line["item"]: line for line in plan.outputs["costEstimate"]["lines"]}
    assert lines["prefill nodes g6.8xlarge"]["usdPerHour"] == 1.0
    assert lines["NAT gateways"]["unitUsdPerHour"] == 0.05


def test_bad_prices_fail_before_any_resource():
    error, monitor = failing_run({NS + "prices": {"instances": {"g6.8xlarge": "cheap"}}})
    assert "prices.instances.g6.8xlarge" in str(error) and monitor.registrations == []


# ---- Weights from S3: the fast path after a node replacement


def manifest_spec(plan) -> dict:
    return plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]


WEIGHTS = {NS + "modelSource": "s3://acme-models/qwen3.5-9b/"}


def test_weights_in_s3_give_the_nodes_read_access_to_that_prefix_only():
    plan = run_program("dev", WEIGHTS)
    configs = llm_configs_by_role(yaml.safe_load(manifest_spec(plan)["serveConfigV2"]), "dev")
    assert {c["model_loading_config"]["model_source"] for c in configs.values()} == {WEIGHTS[NS + "modelSource"]}
    assert {c["model_loading_config"]["model_id"] for c in configs.values()} == {"Qwen/Qwen3.5-9B"}
    (policy,) = [p for p in plan.of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("weights")]
    assert policy.inputs["role"] == "<known after deploy: aws:iam/role:Role::eks-node-role.name>"  # the node role
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
    assert [
        p for p in run_program("dev").of_type("aws:iam/rolePolicy:RolePolicy") if p.name.startswith("weights")
    ] == []


@pytest.mark.parametrize("source", ["gs://bucket/x", "s3://Bad_Bucket/x", "https://huggingface.co/Qwen/Qwen3.5-9B"])
def test_only_hub_ids_and_s3_uris_are_model_sources(source):
    error, monitor = failing_run({NS + "modelSource": source})
    assert "modelSource" in str(error) and "s3://<bucket>/<prefix>" in str(error)
    assert monitor.registrations == []


class BucketElsewhere(CannedAws):
    def call(self, args):
        if args.token == "aws:s3/getBucket:getBucket":
            return {"id": args.args["bucket"], "bucket": args.args["bucket"], "bucketRegion": "eu-west-1"}
        return super().call(args)


def test_weights_bucket_in_another_region_is_refused():
    monitor = RecordingMonitor(BucketElsewhere(EVERYWHERE, ROOMY))
    with pytest.raises(preflight.PreflightError, match="bucket acme-models is in eu-west-1, the stack in us-east-1"):
        run_program("dev", WEIGHTS, monitor=monitor)
    assert monitor.registrations == []


def test_auto_context_length_checks_a_minimal_context():
    """max_model_len -1 lets vLLM pick the longest context that fits: no negative KV arithmetic."""
    doc = collocated_llama({"max_model_len": -1, "max_num_batched_tokens": 2048})
    predictions = model_fit.check_fit(doc, {"collocated": "g6.8xlarge"}, set(), None)
    assert predictions["collocated"].max_model_len == 16
    assert predictions["collocated"].blocks_per_request == 1  # 16 tokens: one block of 16
