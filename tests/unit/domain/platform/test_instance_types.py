"""A stack's own GPU instance types (instanceTypes): described as EC2 does, checked as the table's types are, and
used wherever a pool's hardware matters (the fit, the pods' sizes, the Cluster Autoscaler's template tags)."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.fit.scaling import node_template_tags
from ray_llm_eks.domain.platform import aws_facts
from tests.conftest import settings_error, settings_of

NS = "ray-llm-eks:"
G5 = {"gpuModel": "A10G", "gpus": 1, "gpuMemoryMiB": 24576, "vcpus": 8, "memoryGiB": 32, "nvmeGb": 450}


def _on(instance_type: str, **described) -> dict:
    return {
        NS + "gpuPools": {"collocated": {"instanceType": instance_type}},
        NS + "instanceTypes": {instance_type: described},
    }


def test_a_described_type_plans_and_its_hardware_reaches_the_pool():
    settings = settings_of(_on("g5.2xlarge", **G5), stack="baseline")
    pool = settings.gpu_pools["collocated"]
    assert pool.spec == aws_facts.InstanceSpec(vcpus=8, memory_gib=32, gpus=1, gpu_model="A10G", gpu_memory_mib=24576,
                                               nvme_gb=450)  # fmt: skip
    assert "g5.2xlarge" not in aws_facts.INSTANCE_SPECS and settings.instance_types["g5.2xlarge"] == pool.spec
    (fit,) = settings.serving.fit
    assert fit.startswith("collocated (g5.2xlarge, A10G, max_num_seqs derived): budget 22.08 GiB")
    assert (
        node_template_tags("collocated", pool.spec, efa=False)[
            "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"
        ]
        == "1"
    )


@pytest.mark.parametrize(
    ("described", "key", "allowed"),
    [
        ({**G5, "gpuModel": "Inferentia2"}, "instanceTypes.g5.2xlarge.gpuModel", "an NVIDIA GPU"),
        ({**G5, "gpuModel": "V100"}, "instanceTypes.g5.2xlarge.gpuModel", "CUDA 13 runs"),
        ({k: v for k, v in G5.items() if k != "vcpus"}, "instanceTypes.g5.2xlarge.vcpus", "required"),
        ({**G5, "gpus": 0}, "instanceTypes.g5.2xlarge.gpus", "a positive number"),
        ({**G5, "gpus": "one"}, "instanceTypes.g5.2xlarge.gpus", "a whole number"),
        ({**G5, "gpu": 1}, "instanceTypes.g5.2xlarge.gpu", "did you mean gpus?"),
    ],
)
def test_a_described_type_is_checked_field_by_field(described, key, allowed):
    error = settings_error(_on("g5.2xlarge", **described), stack="baseline")
    assert isinstance(error, ConfigError) and error.key == key and allowed in error.allowed, error


def test_a_name_ec2_does_not_know_or_the_table_has_is_refused():
    error = settings_error(_on("g5.2xlarg", **G5), stack="baseline")
    assert error.key == "instanceTypes.g5.2xlarg" and "did you mean g5.2xlarge?" in error.allowed
    error = settings_error(_on("g6.xlarge", **{**G5, "gpuModel": "L4"}), stack="baseline")
    assert error.key == "instanceTypes.g6.xlarge" and "is in ray_llm_eks/domain/platform/aws_facts.py" in error.allowed


def test_a_described_type_without_efa_is_refused_for_pd_as_the_tables_are():
    overrides = {
        NS + "gpuPools": {"prefill": {"instanceType": "g5.2xlarge"}, "decode": {"instanceType": "g6.8xlarge"}},
        NS + "instanceTypes": {"g5.2xlarge": G5},
    }
    error = settings_error(overrides)
    assert error.key == "gpuPools.prefill.instanceType" and "with EFA" in error.allowed


def test_an_unknown_type_is_answered_with_the_types_that_would_pass_and_the_key_that_adds_one():
    error = settings_error({NS + "gpuPools": {"collocated": {"instanceType": "g4dn.xlarge"}}}, stack="baseline")
    assert error.key == "gpuPools.collocated.instanceType"
    assert "g6.xlarge" in error.allowed and "g5.xlarge" in error.allowed and "g6e.xlarge" in error.allowed
    assert "instanceTypes: {g4dn.xlarge: {gpuModel: ..., gpus: ..., gpuMemoryMiB: ..." in error.allowed
    error = settings_error(
        {NS + "gpuPools": {"prefill": {"instanceType": "g4dn.xlarge"}, "decode": {"instanceType": "g6.8xlarge"}}}
    )
    assert "with EFA: g5.12xlarge" in error.allowed and "g6.xlarge" not in error.allowed


def test_accelerator_names_are_rays():
    from ray.util import accelerators

    rays = {value for name, value in vars(accelerators.accelerators).items() if name.startswith("NVIDIA_")}
    assert rays >= aws_facts.NVIDIA_ACCELERATOR_TYPES
    # Volta and older: CUDA 13 (the serving image's) dropped them.
    assert rays - aws_facts.NVIDIA_ACCELERATOR_TYPES == {"V100", "P100", "P4", "K80"}
