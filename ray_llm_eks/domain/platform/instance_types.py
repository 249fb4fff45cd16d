"""The stack's own GPU instance types (`instanceTypes`): a type our table (ray_llm_eks/domain/platform/aws_facts.py)
lacks, described with what EC2 says of it, so a stack can plan on it without editing the package. Each is checked
as the table's are: a name botocore's EC2 model knows, an NVIDIA GPU the serving image's CUDA runs, then everything
a pool checks of its type (GPUs, EFA, instance store, the model's fit).

    aws ec2 describe-instance-types --instance-types g5.2xlarge \\
      --query 'InstanceTypes[0].[VCpuInfo.DefaultVCpus,MemoryInfo.SizeInMiB,GpuInfo,InstanceStorageInfo.TotalSizeInGB]'

gives every figure (memory in MiB: memoryGiB is it / 1024).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ray_llm_eks.domain.core.errors import UNSET, ConfigError, mapping_of, yaml_text
from ray_llm_eks.domain.core.raw_config import RawConfig, check_fields
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.aws_facts import BotocoreFacts, InstanceSpec, InstanceTable
from ray_llm_eks.domain.platform.field_checks import check_instance_type

KEY = "instanceTypes"
# Field -> (its type, the InstanceSpec field it fills); the first six are required.
FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "gpuModel": (str, "gpu_model"),
    "gpus": (int, "gpus"),
    "gpuMemoryMiB": (int, "gpu_memory_mib"),
    "vcpus": (int, "vcpus"),
    "memoryGiB": (int, "memory_gib"),
    "nvmeGb": (int, "nvme_gb"),
    "efa": (bool, "efa"),
    "networkCards": (int, "network_cards"),
    "maxPods": (int, "max_pods"),
    "networkGbps": ((int, float), "network_gbps"),
}
REQUIRED = ("gpuModel", "gpus", "gpuMemoryMiB", "vcpus", "memoryGiB", "nvmeGb")
FIELD_SHAPE = mapping_of(FIELDS)
SHAPE = mapping_of(FIELDS, by="instance type names")
EXAMPLE = "{g5.2xlarge: {gpuModel: A10G, gpus: 1, gpuMemoryMiB: 24576, vcpus: 8, memoryGiB: 32, nvmeGb: 450}}"


def load(raw: RawConfig, facts: BotocoreFacts) -> InstanceTable:
    """Our table with the stack's own types added (unset: ours alone)."""
    return table(raw.mapping(KEY, SHAPE) or {}, facts)


def table(given: Mapping[str, Any], facts: BotocoreFacts) -> InstanceTable:
    own = {}
    for name, fields in given.items():
        key = f"{KEY}.{name}"
        check_instance_type(key, name, facts)
        if name in aws_facts.INSTANCE_SPECS:
            raise ConfigError(key, fields, f"left out: {name} is in ray_llm_eks/domain/platform/aws_facts.py already")
        fields = check_fields(key, fields, {field: kind for field, (kind, _) in FIELDS.items()})
        missing = [field for field in REQUIRED if field not in fields]
        if missing:
            raise ConfigError(f"{key}.{missing[0]}", UNSET, f"required: {yaml_text(list(REQUIRED))}, e.g. {EXAMPLE}")
        if fields["gpuModel"] not in aws_facts.NVIDIA_ACCELERATOR_TYPES:
            raise ConfigError(
                f"{key}.gpuModel",
                fields["gpuModel"],
                f"an NVIDIA GPU of Ray's accelerator types that CUDA 13 runs: "
                f"{yaml_text(sorted(aws_facts.NVIDIA_ACCELERATOR_TYPES))}",
            )
        for field, value in fields.items():
            if field != "gpuModel" and not isinstance(value, bool) and value <= 0:
                raise ConfigError(f"{key}.{field}", value, "a positive number")
        own[name] = InstanceSpec(**{FIELDS[field][1]: value for field, value in fields.items()})
    return MappingProxyType({**aws_facts.INSTANCE_SPECS, **own}) if own else aws_facts.INSTANCE_SPECS
