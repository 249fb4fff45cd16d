"""The AWS answers the preflight checks need, through pulumi-aws data sources (blocking invokes)."""

from __future__ import annotations

from collections import defaultdict

import pulumi_aws as aws

from ray_llm_eks.domain.platform import aws_facts


class PulumiAwsAnswers:
    """The answers from AWS, through pulumi-aws data sources (blocking invokes)."""

    def zones(self) -> set[str] | None:
        names = aws.get_availability_zones(state="available").names
        return None if names is None else set(names)

    def offered(self, instance_types: list[str]) -> dict[str, set[str]] | None:
        result = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=instance_types)],
        )
        if result.instance_types is None or result.locations is None:
            return None
        zones: dict[str, set[str]] = defaultdict(set)
        for instance_type, zone in zip(result.instance_types, result.locations, strict=True):
            zones[instance_type].add(zone)
        return zones

    def quota(self, code: str) -> float | None:
        value = aws.servicequotas.get_service_quota(service_code="ec2", quota_code=code).value
        return None if value is None else float(value)

    def hardware(self, instance_type: str) -> aws_facts.InstanceSpec | None:
        known = aws_facts.INSTANCE_SPECS.get(instance_type)
        if known is not None:
            return known
        info = aws.ec2.get_instance_type(instance_type=instance_type)
        if info.default_vcpus is None:
            return None
        # nodeadm's max pods for a type missing from eni-max-pods.txt: ENIs x (IPv4 per ENI - 1) + 2.
        max_pods = info.maximum_network_interfaces * (info.maximum_ipv4_addresses_per_interface - 1) + 2
        gpus = info.gpuses or []
        return aws_facts.InstanceSpec(
            vcpus=info.default_vcpus,
            memory_gib=info.memory_size // 1024,
            max_pods=max_pods,
            gpus=sum(gpu.count for gpu in gpus),
            gpu_memory_mib=gpus[0].memory_size if gpus else 0,
            nvme_gb=info.total_instance_storage or 0,
            efa=bool(info.efa_supported),
        )

    def cluster_exists(self, name: str) -> bool | None:
        names = aws.eks.get_clusters().names
        return None if names is None else name in names

    def caller_arn(self) -> str | None:
        return aws.get_caller_identity().arn

    def ebs_encrypted_by_default(self) -> bool | None:
        return aws.ebs.get_encryption_by_default().enabled

    def bucket_region(self, bucket: str) -> str | None:
        return aws.s3.get_bucket(bucket=bucket).bucket_region
