"""Facts about AWS that the config checks need: a small, sourced table of instance hardware
(botocore knows instance *names*, not their GPUs), per-region tables, and BotocoreFacts, the values
read from botocore's own API models (loaded and cached by ray_llm_eks/adapters/botocore_facts.py).

Nothing here calls AWS or reads a file, so `make plan` and the tests can reject a wrong value
without credentials.

No `from __future__ import annotations`: the component provider host reads InstanceSpec's annotations as types
(GpuNodePoolArgs.instance, ray_llm_eks/components/gpu_nodes.py).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Partition:
    """One AWS partition as botocore's endpoint data lists it."""

    name: str  # aws, aws-cn, aws-us-gov, ...
    dns_suffix: str
    regions: frozenset[str]


@dataclass(frozen=True)
class BotocoreFacts:
    """What the config checks read from botocore's API models and endpoint data, as plain values.
    ray_llm_eks/adapters/botocore_facts.py loads (and caches) them; nothing here reads a file."""

    ec2_instance_types: frozenset[str]  # botocore `ec2` `InstanceType` enum
    eks_log_types: tuple[str, ...]  # botocore `eks` `LogType` enum
    log_retention_days: tuple[int, ...]  # botocore `logs` `Days` shape (listed in its prose)
    partitions: tuple[Partition, ...]

    def region_partition(self, region: str) -> str | None:
        """The partition a region belongs to; None for a region botocore does not list."""
        return next((p.name for p in self.partitions if region in p.regions), None)

    def known_regions(self) -> list[str]:
        return sorted(r for p in self.partitions for r in p.regions)

    def partition_dns_suffix(self, region: str) -> str:
        for partition in self.partitions:
            if region in partition.regions:
                return partition.dns_suffix
        raise KeyError(region)

    def ec2_service_principal(self, region: str) -> str | None:
        return EC2_SERVICE_PRINCIPAL.get(self.region_partition(region) or "")

    def eks_addon_registry(self, region: str) -> str | None:
        """`<account>.dkr.ecr.<region>.<dns suffix>` of the EKS add-on images in this region."""
        account = EKS_ADDON_REGISTRY_ACCOUNTS.get(region)
        if account is None or self.region_partition(region) is None:
            return None
        return f"{account}.dkr.ecr.{region}.{self.partition_dns_suffix(region)}"


# EC2's service principal for an instance role's trust policy, per partition. Not `ec2.<dnsSuffix>`:
# that breaks in aws-eusc ("Invalid principal in policy: ec2.amazonaws.eu", pulumi-eks #2341, fixed
# by #2344: "All partitions use ec2.amazonaws.com"); the AWS provider's service-principal data
# (terraform-provider-aws internal/service/meta/service_principal_data_source.go) also gives
# ec2.amazonaws.com in every partition. A partition missing here is refused, not guessed.
EC2_SERVICE_PRINCIPAL = {
    partition: "ec2.amazonaws.com"
    for partition in ("aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b", "aws-iso-e", "aws-iso-f", "aws-eusc")
}


# ECR registry account of the Amazon EKS add-on images, by region (the EKS user guide's "Amazon
# container image registries for Amazon EKS add-ons", as awslabs/amazon-eks-ami
# templates/al2/runtime/get-ecr-uri.sh encoded it before AL2 support was removed). The EFA device
# plugin chart defaults to us-west-2's registry: every other region would pull across regions
# through the NAT, and other partitions could not pull at all.
_EKS_ADDON_MAIN_ACCOUNT = "602401143452"
EKS_ADDON_REGISTRY_ACCOUNTS = {
    **dict.fromkeys(
        (
            "ap-northeast-1",
            "ap-northeast-2",
            "ap-northeast-3",
            "ap-south-1",
            "ap-southeast-1",
            "ap-southeast-2",
            "ca-central-1",
            "eu-central-1",
            "eu-north-1",
            "eu-west-1",
            "eu-west-2",
            "eu-west-3",
            "sa-east-1",
            "us-east-1",
            "us-east-2",
            "us-west-1",
            "us-west-2",
        ),
        _EKS_ADDON_MAIN_ACCOUNT,
    ),
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
    "us-iso-east-1": "725322719131",
    "us-iso-west-1": "608367168043",
    "us-isob-east-1": "187977181151",
    "us-isob-west-1": "321162350305",
    "us-isof-east-1": "171035529773",
    "us-isof-south-1": "676585237158",
    "eu-isoe-west-1": "249663109785",
    "eusc-de-east-1": "877088126301",
}


INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
# Ray's NVIDIA accelerator type names (Ray 2.58 ray/util/accelerators/accelerators.py), less the GPUs older than
# Turing: CUDA 13, the serving image's, dropped Maxwell, Pascal and Volta (CUDA 13.0 release notes, "Deprecated
# Architectures"). What a stack's own instance type may name as its GPU (instanceTypes.<type>.gpuModel).
NVIDIA_ACCELERATOR_TYPES = frozenset(
    [
        "T4",
        "A10G",
        "L4",
        "L40S",
        "A100",
        "A100-40G",
        "A100-80G",
        "H100",
        "H200",
        "H20",
        "B200",
        "B300",
        "GB200",
        "GB300",
        "RTX-PRO-6000",
    ]
)


@dataclass(frozen=True)
class InstanceSpec:
    """Hardware of one EC2 instance type, as far as sizing and EFA care."""

    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""  # Ray accelerator_type name (ray.util.accelerators names)
    gpu_memory_mib: int = 0  # per GPU, as EC2 DescribeInstanceTypes reports it (GpuInfo)
    efa: bool = False
    network_cards: int = 1
    nvme_gb: int = 0
    max_pods: int = 110  # nodeadm's max pods (eni-max-pods.txt); 110 is its fallback
    gpudirect_rdma: bool = False  # EFA can read/write GPU memory directly (p4d, p5); not on g5/g6/g6e
    network_gbps: float = 0.0  # baseline network bandwidth (0: not in our table); the KV transfer floor's base


# One constructor per GPU model, which states its name and memory once. A row: vCPUs, memory in GiB, then by name.
_l4 = partial(InstanceSpec, gpu_model="L4", gpu_memory_mib=22888)
_l40s = partial(InstanceSpec, gpu_model="L40S", gpu_memory_mib=45776)
_a10g = partial(InstanceSpec, gpu_model="A10G", gpu_memory_mib=24576)
_a100 = partial(InstanceSpec, gpu_model="A100-40G", gpu_memory_mib=40960, gpudirect_rdma=True)
_h100 = partial(InstanceSpec, gpu_model="H100", gpu_memory_mib=81920, gpudirect_rdma=True)
_cpu = InstanceSpec


# Source: EC2 DescribeInstanceTypes data (vCPU, memory, GpuInfo, EFA) as published in Karpenter's
# generated instance-type table, cross-checked with the EC2 "Accelerated computing instance
# specifications" pages (docs.aws.amazon.com/ec2/latest/instancetypes/). network_gbps:
# aws/karpenter-provider-aws pkg/providers/instancetype/zz_generated.bandwidth.go (baseline Mbit/s).
# max_pods from awslabs/amazon-eks-ami nodeadm/internal/kubelet/eni-max-pods.txt. Extend this table to
# use another instance type; a type that is absent is reported, never guessed.
INSTANCE_SPECS: dict[str, InstanceSpec] = {
    # G6: NVIDIA L4 24 GB. EFA only from 8xlarge up.
    "g6.xlarge": _l4(4, 16, gpus=1, nvme_gb=250, max_pods=58, network_gbps=2.5),
    "g6.2xlarge": _l4(8, 32, gpus=1, nvme_gb=450, max_pods=58, network_gbps=5),
    "g6.4xlarge": _l4(16, 64, gpus=1, nvme_gb=600, max_pods=234, network_gbps=10),
    "g6.8xlarge": _l4(32, 128, gpus=1, efa=True, nvme_gb=900, max_pods=234, network_gbps=25),
    "g6.12xlarge": _l4(48, 192, gpus=4, efa=True, nvme_gb=3760, max_pods=234, network_gbps=40),
    "g6.16xlarge": _l4(64, 256, gpus=1, efa=True, nvme_gb=1880, max_pods=737, network_gbps=25),
    "g6.24xlarge": _l4(96, 384, gpus=4, efa=True, nvme_gb=3760, max_pods=737, network_gbps=50),
    "g6.48xlarge": _l4(192, 768, gpus=8, efa=True, nvme_gb=7520, max_pods=737, network_gbps=100),
    # G6e: NVIDIA L40S 48 GB. EFA from 8xlarge up.
    "g6e.xlarge": _l40s(4, 32, gpus=1, nvme_gb=250, max_pods=58, network_gbps=2.5),
    "g6e.2xlarge": _l40s(8, 64, gpus=1, nvme_gb=450, max_pods=58, network_gbps=5),
    "g6e.4xlarge": _l40s(16, 128, gpus=1, nvme_gb=600, max_pods=234, network_gbps=20),
    "g6e.8xlarge": _l40s(32, 256, gpus=1, efa=True, nvme_gb=900, max_pods=234, network_gbps=25),
    "g6e.12xlarge": _l40s(48, 384, gpus=4, efa=True, nvme_gb=3800, max_pods=292, network_gbps=100),
    "g6e.16xlarge": _l40s(64, 512, gpus=1, efa=True, nvme_gb=1900, max_pods=737, network_gbps=35),
    "g6e.24xlarge": _l40s(96, 768, gpus=4, efa=True, network_cards=2, nvme_gb=3800, max_pods=492, network_gbps=200),
    "g6e.48xlarge": _l40s(192, 1536, gpus=8, efa=True, network_cards=4, nvme_gb=7600, max_pods=492, network_gbps=400),
    # G5: NVIDIA A10G 24 GB. EFA from 8xlarge up.
    "g5.xlarge": _a10g(4, 16, gpus=1, nvme_gb=250, max_pods=58, network_gbps=2.5),
    "g5.8xlarge": _a10g(32, 128, gpus=1, efa=True, nvme_gb=900, max_pods=234, network_gbps=25),
    "g5.12xlarge": _a10g(48, 192, gpus=4, efa=True, nvme_gb=3800, max_pods=737, network_gbps=40),
    "g5.48xlarge": _a10g(192, 768, gpus=8, efa=True, nvme_gb=7600, max_pods=345, network_gbps=100),
    # P4d / P5: A100 40 GB, H100 80 GB; several network cards, one EFA device each.
    "p4d.24xlarge": _a100(96, 1152, gpus=8, efa=True, network_cards=4, nvme_gb=8000, max_pods=737, network_gbps=400),
    "p5.48xlarge": _h100(192, 2048, gpus=8, efa=True, network_cards=32, nvme_gb=30400, max_pods=100, network_gbps=3200),
    # Types users pick for system nodes, so the head's room is checked offline (vCPU, GiB; max pods
    # from eni-max-pods.txt for t3/m5; m6i by its formula ENIs x (IPv4 per ENI - 1) + 2, the same
    # 3 x 10 and 4 x 15 ENI shape as m5). T3 (burstable), M5, M6i.
    "t3.small": _cpu(2, 2, max_pods=11),
    "t3.medium": _cpu(2, 4, max_pods=17),
    "t3.large": _cpu(2, 8, max_pods=35),
    "t3.xlarge": _cpu(4, 16, max_pods=58),
    "t3.2xlarge": _cpu(8, 32, max_pods=58),
    "m5.large": _cpu(2, 8, max_pods=29),
    "m5.xlarge": _cpu(4, 16, max_pods=58),
    "m5.2xlarge": _cpu(8, 32, max_pods=58),
    "m6i.large": _cpu(2, 8, max_pods=29),
    "m6i.xlarge": _cpu(4, 16, max_pods=58),
    "m6i.2xlarge": _cpu(8, 32, max_pods=58),
    # M7i: system nodes (no GPU, no EFA below 48xlarge).
    "m7i.large": _cpu(2, 8, max_pods=29),
    "m7i.xlarge": _cpu(4, 16, max_pods=58),
    "m7i.2xlarge": _cpu(8, 32, max_pods=58),
    "m7i.4xlarge": _cpu(16, 64, max_pods=234),
    "m7i.8xlarge": _cpu(32, 128, max_pods=234),
}
# The instance types a stack plans with: INSTANCE_SPECS and the stack's own
# (ray_llm_eks/domain/platform/instance_types.py).
InstanceTable = Mapping[str, InstanceSpec]


def with_type(name: str, spec: InstanceSpec | None) -> InstanceTable:
    """INSTANCE_SPECS, and `name` described as `spec` where one is given (a component's Args for a type of a
    stack's own)."""
    return INSTANCE_SPECS if spec is None else {**INSTANCE_SPECS, name: spec}
