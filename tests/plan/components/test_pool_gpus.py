"""GPUs, not nodes: a pool whose nodes hold more GPUs than its replicas use warns with how many idle, what
they cost, and ways to use them that the stack's own checks accept."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from offline.plan import run_program
from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.fit import pool_use
from tests.conftest import ROOT, STACKS

NS = "ray-llm-eks:"


def _pools(instance_type: str) -> dict:
    return {NS + "gpuPools": {role: {"instanceType": instance_type} for role in ("prefill", "decode")}}


def _gpu_warnings(warnings: list[str]) -> dict[str, str]:
    return {w.split(" = ")[0]: w for w in warnings if w.startswith("gpuPools.")}


@pytest.mark.parametrize("name", sorted(STACKS))
def test_shipped_stacks_use_every_gpu(plans, name):
    """prod and dp included: dp's 8 one-GPU replicas fill its 2 g6.12xlarge at max, tp's 2 TP-4 replicas too."""
    assert _gpu_warnings(plans[name].warnings) == {}


@pytest.mark.parametrize(
    ("instance_type", "gpus", "idle_cost", "node_cost"),
    [("g5.12xlarge", 4, "4.25", "5.67"), ("p4d.24xlarge", 8, "19.21", "21.96")],
)
def test_one_replica_on_a_multi_gpu_node_warns_in_gpus_and_dollars(instance_type, gpus, idle_cost, node_cost):
    plan = run_program("dev", _pools(instance_type))
    warnings = _gpu_warnings(plan.warnings)
    assert sorted(warnings) == ["gpuPools.decode.instanceType", "gpuPools.prefill.instanceType"]
    warning = warnings["gpuPools.decode.instanceType"]
    assert warning.startswith(
        f"gpuPools.decode.instanceType = {instance_type}: 1 decode replica(s) x 1 GPU(s) use 1 of {gpus} GPUs "
        f"(1 node(s) x {gpus}), {gpus - 1} idle at {idle_cost} $/h; to use them: replicas.decode {gpus}; or "
        f"gpuPools.decode.instanceType g6.8xlarge (2.01 $/h instead of {node_cost} $/h);"
    )
    assert "tensor_parallel_size" not in warning  # PD: both sides' sizes are chosen together


@pytest.mark.parametrize("change", [{NS + "replicas": {"prefill": 4, "decode": 4}}, _pools("g6.8xlarge")])
def test_each_way_out_uses_the_gpus(change):
    """What the g5.12xlarge warnings suggest, applied: the plan passes and nothing is idle."""
    plan = run_program("dev", {**_pools("g5.12xlarge"), **change})
    assert _gpu_warnings(plan.warnings) == {}


def test_a_collocated_role_is_offered_the_largest_tensor_parallel_size_its_heads_allow():
    """28 query heads over 4 KV heads on 8 GPUs: TP 8 and 7 would fit the memory, vLLM accepts 2 and 4."""
    spec = {
        "parameters": 8e9,
        "weightDtype": "bfloat16",
        "kvLayers": 28,
        "kvHeads": 4,
        "headDim": 128,
        "stateMiBPerSequence": 0,
        "maxContext": 32768,
        "attentionHeads": 28,
    }
    overrides = {
        NS + "modelId": "me/model",
        NS + "modelSpec": spec,
        NS + "gpuPools": {"collocated": {"instanceType": "g6.48xlarge"}},
    }
    (warning,) = _gpu_warnings(run_program("baseline", overrides).warnings).values()
    assert "7 idle at" in warning and "collocated engine_kwargs.tensor_parallel_size 4 in the serve file" in warning


def test_an_autoscaling_role_warns_of_gpus_idle_even_at_max():
    plan = run_program("tp", {NS + "gpuPools": {"collocated": {"instanceType": "p4d.24xlarge", "maxSize": 2}}})
    (warning,) = _gpu_warnings(plan.warnings).values()
    assert "collocated max_replicas 2 x 4 GPU(s) use 8 of 16 GPUs (2 node(s) at maxSize x 8), 8 idle" in warning
    assert "autoscaling.collocated.maxReplicas 4; or collocated engine_kwargs.tensor_parallel_size 8" in warning


def test_only_what_the_checks_accept_is_named_and_an_unknown_price_is_said():
    config = stack.stack_file("dev", ROOT, overrides=_pools("g5.12xlarge"))
    settings = stack.load_settings(config)
    asked = []

    def refuse(changes):
        asked.append(changes)
        return False

    unpriced = replace(settings, region="ap-south-2")
    decode, prefill = pool_use.idle_gpu_warnings(unpriced, refuse)
    assert prefill.startswith("gpuPools.prefill.instanceType = g5.12xlarge")
    assert {"replicas.decode": 4} in asked and any("gpuPools.decode.instanceType" in c for c in asked)
    assert "to use them" not in decode
    assert re.search(r"3 idle at a price unknown \(g5\.12xlarge in ap-south-2: set prices.instances\)", decode)
    # A real check: the suggestions it passes are exactly those the stack accepts.
    passes = stack.changed_stack_passes(config)
    assert passes({"replicas.decode": 4}) and not passes({"replicas.decode": 5})
    assert not passes({"gpuPools.decode.instanceType": "g6.xlarge"})  # no EFA: PD moves the KV cache over it
