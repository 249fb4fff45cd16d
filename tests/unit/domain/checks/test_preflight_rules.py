"""Preflight rules called directly: does the model fit the GPU, what the stack costs per hour, which
model sources are allowed. The program's wiring of them (refused before any resource, printed by
make plan, checked against AWS at deploy time) is in tests/plan/components/test_preflight.py."""

from __future__ import annotations

import re

import pytest

from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.checks import preflight
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.fit.model_fit import check_role
from ray_llm_eks.domain.platform import aws_facts, prices
from ray_llm_eks.domain.serving import fit_prediction, model_table
from ray_llm_eks.domain.serving.fit_prediction import Engine, predict
from ray_llm_eks.domain.serving.model_table import GIB
from ray_llm_eks.domain.serving.serve_app import ServeDocument, parse_document
from ray_llm_eks.domain.stack import cost
from tests.conftest import ROOT, region_overrides, settings_error, settings_of

NS = "ray-llm-eks:"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# Llama 3.1 is gated on Hugging Face: a stack serving it must set hfToken.
LLAMA = {NS + "modelId": LLAMA_8B, NS + "hfToken": SecretValue("hf_test")}
L4 = aws_facts.INSTANCE_SPECS["g6.8xlarge"]


def test_70b_on_dev_fails_saying_by_how_much_and_what_would_fit():
    error = settings_error({NS + "modelId": "meta-llama/Llama-3.1-70B-Instruct", NS + "hfToken": SecretValue("t")})
    message = str(error)
    assert isinstance(error, ConfigError)
    assert "gpuPools.prefill = g6.8xlarge" in message and "does not fit" in message
    short = float(re.search(r"short by ([\d.]+) GiB", message).group(1))
    assert short > 100  # 131.5 GiB of bf16 weights against ~20.6 GiB usable on one L4
    assert "tensor_parallel_size" in message


def test_llama_8b_at_full_context_fails_and_the_suggested_length_fits():
    error = settings_error({**LLAMA, NS + "maxModelLen": 131072})
    message = str(error)
    # vLLM's reason: 8192 blocks of 16 tokens x 32 layers x 4 KiB = 16 GiB, 128 KiB/token x 131072
    assert (
        "To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is needed" in message
    )
    assert "g6e.8xlarge" in message  # an L40S (48 GB) holds it at the same parallelism
    suggested = int(re.search(r"max_model_len <= (\d+)", message).group(1))
    settings_of({**LLAMA, NS + "maxModelLen": suggested})  # the edge: fits
    error = settings_error({**LLAMA, NS + "maxModelLen": suggested + 16})
    assert "does not fit" in str(error)


def test_llama_8b_at_8192_fits_dev():
    configs = settings_of({**LLAMA, NS + "maxModelLen": 8192}).serving.serve_document.roles
    assert {c.engine.max_model_len for c in configs.values()} == {8192}


def test_qwen35_weights_and_budget_are_the_hand_arithmetic():
    """Qwen3.5-9B on one L4, bf16, language_model_only: weights = the text model's 8,953,803,264
    parameters x 2 B (16.68 GiB; no vision tower, no MTP head) + what vLLM measured beyond them
    (16.80 GiB logged); 22888 MiB x 0.92 usable; KV 2 x 8 layers x 4 heads x 256 x 2 B = 32 KiB/token."""
    spec = model_table.KNOWN_MODELS["Qwen/Qwen3.5-9B"]
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
    spec = model_table.KNOWN_MODELS[LLAMA_8B]
    l4, h100 = aws_facts.INSTANCE_SPECS["g6.8xlarge"], aws_facts.INSTANCE_SPECS["p5.48xlarge"]
    reserve = lambda engine, gpu=l4: fit_prediction.reserve_gib(spec, engine.on(gpu))  # noqa: E731
    assert reserve(Engine(4096, 1, 1, 0.9, "auto", 2048)) == 2.0
    assert reserve(Engine(4096, 1, 1, 0.9, "auto", 8192)) == 3.0
    assert reserve(Engine(4096, 2, 1, 0.9, "auto", 2048)) == pytest.approx(3.8)
    # An unset batch is vLLM's default for the GPU: 2048 tokens and 256 sequences on an L4; 8192 and
    # 1024 on an 80 GB H100 (engine/arg_utils.py get_batch_defaults).
    assert reserve(Engine(4096, 1, 1, 0.9, "auto")) == 2.0
    assert reserve(Engine(4096, 1, 1, 0.9, "auto"), h100) == pytest.approx(3.0 + 768 * 1.2 / 1024)


def test_tensor_parallel_splits_weights_and_kv_heads():
    spec = model_table.KNOWN_MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    one, eight = (predict(spec, Engine(8192, tp, 1, 0.9, "auto"), L4) for tp in (1, 8))
    assert eight.weights == pytest.approx(one.weights / 8)
    assert eight.layout.page_bytes * 8 == one.layout.page_bytes
    sixteen = predict(spec, Engine(8192, 16, 1, 0.9, "auto"), L4)
    assert sixteen.layout.page_bytes == eight.layout.page_bytes, "8 KV heads: beyond TP 8 each GPU holds one head"
    fp8 = predict(spec, Engine(8192, 8, 1, 0.9, "fp8"), L4)
    assert fp8.layout.page_bytes * 2 == eight.layout.page_bytes


def test_a_stack_asking_256_sequences_of_qwen35_on_an_l4_fails_in_one_line():
    error = settings_error({NS + "maxNumSeqs": 256})
    message = str(error)
    assert isinstance(error, ConfigError) and "\n" not in message
    # The key at fault and the largest value that plans first (the stack derives 69 on an L4), then vLLM's reason.
    assert message.startswith(
        "Pulumi.dev.yaml: invalid config ray-llm-eks:maxNumSeqs = 256: at most 69 for Qwen/Qwen3.5-9B on g6.8xlarge "
        "(L4) or leave it unset (the stack derives it)"
    )
    assert "vLLM 0.26.0 would refuse to start: 'max_num_seqs (256) exceeds available Mamba cache blocks (72)" in message
    error = settings_error({NS + "maxNumSeqs": 0})
    assert "maxNumSeqs = 0: a whole number of sequences per engine, 1 or more" in str(error)


def collocated_llama(engine_kwargs: dict) -> ServeDocument:
    """A rendered collocated serve document for Llama-3.1-8B with these engine arguments."""
    llm = {"model_loading_config": {"model_id": LLAMA_8B}, "engine_kwargs": engine_kwargs}
    app = {"import_path": "ray.serve.llm:build_openai_app", "args": {"llm_configs": [llm]}}
    return parse_document({"applications": [app]}, "t")


def test_unset_max_model_len_means_the_whole_context():
    spec = model_table.KNOWN_MODELS[LLAMA_8B]
    document = collocated_llama({"max_num_batched_tokens": 2048})
    with pytest.raises(ConfigError, match=rf"one request with the model's max seq len \({spec.max_context}\)"):
        model_fit.check_fit(document, {"collocated": "g6.8xlarge"}, set(), None)


def test_context_beyond_the_model_fails():
    error = settings_error({**LLAMA, NS + "maxModelLen": 200000})
    assert "maxModelLen = 200000" in str(error) and "at most 131072" in str(error)


def test_tensor_parallel_wider_than_the_instance_fails():
    spec = model_table.KNOWN_MODELS[LLAMA_8B]
    with pytest.raises(ConfigError, match="an instance with >= 2 GPUs"):
        check_role("decode", LLAMA_8B, spec, Engine(4096, 2, 1, 0.9, "auto"), "g6.8xlarge", need_efa=True)


def test_unknown_model_needs_its_facts():
    error = settings_error({NS + "modelId": "acme/secret-13b"})
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
    error = settings_error({NS + "modelId": "acme/secret-13b", NS + "modelSpec": facts})
    assert "acme/secret-13b does not fit" in str(error)  # 24.2 GiB of weights > one L4
    small = settings_of({NS + "modelId": "acme/secret-3b", NS + "modelSpec": {**facts, "parameters": 3e9}})
    configs = small.serving.serve_document.roles.values()
    assert {c.model.model_id for c in configs} == {"acme/secret-3b"}
    error = settings_error({NS + "modelId": "acme/x", NS + "modelSpec": {**facts, "kvHead": 8}})
    assert "modelSpec.kvHead" in str(error) and "did you mean kvHeads?" in str(error)


def test_quota_families():
    assert preflight.quota_for("g6.8xlarge") == preflight.G_AND_VT
    assert preflight.quota_for("p5.48xlarge") == preflight.P_INSTANCES
    assert preflight.quota_for("m7i.xlarge") == preflight.STANDARD
    assert preflight.quota_for("inf2.xlarge") is None


def hourly(overrides: dict | None = None, stack: str = "dev") -> cost.CostEstimate:
    settings = settings_of(overrides, stack)
    return cost.estimate(settings, settings.prices)


def test_dev_cost_is_two_gpu_nodes_a_system_node_eks_and_a_nat():
    # us-east-1 on-demand (AWS price list, ray_llm_eks/domain/platform/prices.py): g6.8xlarge 2.0144, m7i.xlarge 0.2016,
    # EKS 0.10, NAT gateway 0.045 per hour.
    reference = 2 * 2.0144 + 0.2016 + 0.10 + 0.045
    estimated = hourly()
    assert abs(estimated.usd_per_hour - reference) / reference < 0.10
    assert estimated.as_output()["usdPerHour"] == estimated.usd_per_hour


def test_complete_regions_price_every_instance_type_we_know():
    for region in prices.COMPLETE_REGIONS:
        table = prices.INSTANCE_USD_PER_HOUR[region]
        assert [t for t in aws_facts.INSTANCE_SPECS if t not in table] == [], region
        assert region in prices.NAT_GATEWAY_USD_PER_HOUR and region in prices.EBS_GP3_USD_PER_GB_MONTH
        assert region in prices.PRICES_AS_OF
    doc = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.search(r"complete prices for ([^.]*)\.", doc).group(1)
    assert sorted(re.findall(r"`([a-z]{2}-[a-z]+-\d)`", listed)) == sorted(prices.COMPLETE_REGIONS)


def test_prod_pays_for_a_nat_per_zone():
    lines = {line["item"]: line for line in hourly(stack="prod").as_output()["lines"]}
    assert lines["NAT gateways"]["quantity"] == 3
    assert lines["prefill nodes g6.8xlarge"]["quantity"] == 2


def test_unknown_prices_are_said_not_guessed():
    estimate = hourly(region_overrides("eu-south-2")).as_output()
    assert estimate["usdPerHour"] is None
    assert "prefill nodes g6.8xlarge" in estimate["unknownPrices"]
    assert "total: unknown; at least 0.11 $/h" in cost.table(estimate)
    # A region without a table says so in the header, not as a date.
    assert "(no price table for eu-south-2: only prices the same in every region)" in cost.table(estimate)


def test_stack_prices_override_the_table():
    estimate = hourly({NS + "prices": {"instances": {"g6.8xlarge": 1.0}, "natGatewayPerHour": 0.05}})
    lines = {line["item"]: line for line in estimate.as_output()["lines"]}
    assert lines["prefill nodes g6.8xlarge"]["usdPerHour"] == 1.0
    assert lines["NAT gateways"]["unitUsdPerHour"] == 0.05


@pytest.mark.parametrize("source", ["gs://bucket/x", "s3://Bad_Bucket/x", "https://huggingface.co/Qwen/Qwen3.5-9B"])
def test_only_hub_ids_and_s3_uris_are_model_sources(source):
    error = settings_error({NS + "modelSource": source})
    assert "modelSource" in str(error) and "s3://<bucket>/<prefix>" in str(error)


def test_auto_context_length_checks_a_minimal_context():
    """max_model_len -1 lets vLLM pick the longest context that fits: no negative KV arithmetic."""
    doc = collocated_llama({"max_model_len": -1, "max_num_batched_tokens": 2048})
    predictions = model_fit.check_fit(doc, {"collocated": "g6.8xlarge"}, set(), None)
    assert predictions["collocated"].max_model_len == 16
    assert predictions["collocated"].blocks_per_request == 1  # 16 tokens: one block of 16


def test_the_gcs_stores_estimated_price_is_said_until_the_stack_sets_one():
    store = "GCS store ElastiCache Valkey cache.t4g.small"
    estimate = hourly(stack="prod").as_output()
    assert estimate["estimatedPrices"] == [store]
    table = cost.table(estimate)
    assert f"estimated, not from AWS's price list: {store}" in table
    assert next(row for row in table.splitlines() if row.strip().startswith(store)).endswith("(estimate)")
    priced = hourly({NS + "prices": {"instances": {"cache.t4g.small": 0.03}}}, stack="prod").as_output()
    assert priced["estimatedPrices"] == [] and "estimate" not in cost.table(priced)


def documented_regions() -> set[str]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {r for d in docs for r in re.findall(r"\b[a-z]{2}-(?:east|west|north|south|central)-\d\b", d.read_text())}


def test_a_copy_of_dev_in_a_complete_region_has_a_known_total_of_one_date():
    dates = set()
    for region in prices.COMPLETE_REGIONS:
        estimate = hourly(region_overrides(region)).as_output()
        assert (region, estimate["unknownPrices"]) == (region, [])
        dates.add(estimate["pricesAsOf"])
    assert len(dates) == 1


def test_every_documented_region_is_complete_or_the_docs_say_what_it_lacks():
    """A copy of dev in any region the docs name: a known total, or docs/architecture.md names the region and
    each price it lacks (never a guessed price)."""
    cost_doc = (ROOT / "docs" / "architecture.md").read_text().split("## Cost estimate", 1)[1].split("\n## ", 1)[0]
    said = {"internal load balancer (NLB)": "internal load balancer", "NLB capacity units (budget)": "capacity units"}
    assert {"us-east-1", "us-west-2"} <= documented_regions()
    for region in sorted(documented_regions() - set(prices.COMPLETE_REGIONS)):
        unknown = hourly(region_overrides(region)).as_output()["unknownPrices"]
        assert unknown, f"{region} prices all of dev: list it in prices.COMPLETE_REGIONS"
        assert region in cost_doc, region
        named = [said.get(item, item.split()[-1].split(".")[0]) for item in unknown]
        assert [n for n in named if n not in cost_doc] == [], region
