"""The checks a stack key and a component's Args field share (one rule, one line, either way in): the
Kubernetes names, bounds and choices the service's objects need, the cluster's name and the VPC's layout.
`key` is the stack key or the Args field; `file` names the Args type where the value came from a component's
caller (ray_llm_eks/domain/core/errors.py line())."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, did_you_mean, yaml_text
from ray_llm_eks.domain.core.facts import ENVIRONMENTS, EXACT_CHART_VERSION, KUBERAY_NAMESPACE, NAT_MODES
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform import aws_facts, sizing
from ray_llm_eks.domain.platform.aws_facts import BotocoreFacts
from ray_llm_eks.domain.platform.versions import KUBERNETES_VERSIONS, ChartPin

# Exist already / belong to the operator: the service creates its own.
TAKEN_NAMESPACES = ("default", KUBERAY_NAMESPACE)


def check_service_name(key: str, value: str, file: str | None = None) -> str:
    # KubeRay derives <name>-head-svc / <name>-serve-svc from it; 47 keeps them valid DNS labels.
    if not isinstance(value, str) or not re.fullmatch(r"[a-z]([-a-z0-9]{0,45}[a-z0-9])?", value):
        raise ConfigError(key, value, "a DNS-1035 label of at most 47 characters", file)
    return value


def check_namespace(key: str, value: str, file: str | None = None) -> str:
    if (
        not isinstance(value, str)
        or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value)
        or value.startswith("kube-")
    ):
        raise ConfigError(key, value, "a DNS-1123 label (not kube-*)", file)
    if value in TAKEN_NAMESPACES:
        raise ConfigError(key, value, f"a namespace of its own, not one of {yaml_text(TAKEN_NAMESPACES)}", file)
    return value


def check_ready_timeout(key: str, value: int, file: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 600 <= value <= 14400:
        raise ConfigError(key, value, "600 to 14400 (image pull + weights + engine start)", file)
    return value


def check_chart_version(key: str, version: str, chart: str, example: str, file: str | None = None) -> str:
    if not isinstance(version, str) or not re.fullmatch(EXACT_CHART_VERSION, version):
        raise ConfigError(key, version, f"an exact version of the {chart} chart, such as {example}", file)
    return version


def chart_pin(raw: RawConfig, key: str, source: tuple[str, str]) -> ChartPin:
    """A chart from its (repository, name) in ray_llm_eks/domain/platform/versions.py, at the stack's version (its
    default is the table's)."""
    version = check_chart_version(key, raw.text(key), source[1], config_keys.default(key))
    return ChartPin(source[0], source[1], version)


def check_one_of(key: str, value, allowed: Sequence, file: str | None = None, what: str = ""):
    """`value` if it is one of `allowed`, else the one line naming them (`what` names the list, e.g. a key)."""
    if value not in allowed:
        raise ConfigError(key, value, f"one of {what + ' ' if what else ''}{yaml_text(list(allowed))}", file)
    return value


def check_environment(key: str, value: str, file: str | None = None) -> str:
    return check_one_of(key, value, ENVIRONMENTS, file)


def check_cluster_name(key: str, value: str, file: str | None = None) -> str:
    # EKS: 1-100 chars, letter first, then letters, digits, hyphens, underscores.
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,99}", value):
        raise ConfigError(key, value, "1-100 letters, digits, '-' or '_', starting with a letter", file)
    return value


def check_kubernetes_version(key: str, value: str, file: str | None = None) -> str:
    if value not in KUBERNETES_VERSIONS:
        raise ConfigError(key, value, f"one of {yaml_text(sorted(KUBERNETES_VERSIONS))}", file)
    return value


def cidr(key: str, value: str, file: str | None = None) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(value, strict=True)
    except (TypeError, ValueError) as err:
        raise ConfigError(key, value, f"an IPv4 CIDR block such as 10.0.0.0/16 ({err})", file) from None


_PRIVATE_RANGES = [ipaddress.IPv4Network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
# Docker's default bridge; AWS warns a VPC on it breaks pods that talk to it (EKS user guide, VPC reqs).
_DOCKER_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")


def private_cidr(key: str, value: str, prefix_range: tuple[int, int], file: str | None = None) -> ipaddress.IPv4Network:
    net = cidr(key, value, file)
    lo, hi = prefix_range
    if not any(net.subnet_of(r) for r in _PRIVATE_RANGES) or not lo <= net.prefixlen <= hi:
        raise ConfigError(key, value, f"a private (RFC 1918) block with prefix /{lo} to /{hi}", file)
    return net


def check_vpc_cidr(key: str, value: str, file: str | None = None) -> str:
    # /16../20: each AZ's private subnet is a quarter of the VPC; VPC CNI gives every pod a VPC IP.
    vpc = private_cidr(key, value, (16, 20), file)
    if vpc.overlaps(_DOCKER_BRIDGE):
        raise ConfigError(key, str(vpc), f"a block that does not overlap {_DOCKER_BRIDGE} (Docker bridge)", file)
    return str(vpc)


def check_availability_zones(key: str, zones: Sequence[str], region: str, file: str | None = None) -> tuple[str, ...]:
    az_pattern = re.compile(rf"^{re.escape(region)}[a-z]$")
    if isinstance(zones, str) or not isinstance(zones, Sequence):
        raise ConfigError(key, zones, f"zones of region {region}, such as {region}a", file)
    for az in zones:
        if not isinstance(az, str) or not az_pattern.match(az):
            raise ConfigError(key, list(zones), f"zones of region {region}, such as {region}a", file)
    if len(set(zones)) != len(zones) or not 2 <= len(zones) <= 3:
        raise ConfigError(key, list(zones), "2 or 3 distinct zones (the EKS control plane needs two)", file)
    return tuple(zones)


def check_gpu_availability_zone(key: str, value: str, zones: Sequence[str], file: str | None = None) -> str:
    return check_one_of(key, value, zones, file, what="availabilityZones")


def check_nat_gateways(key: str, value: str, file: str | None = None) -> str:
    return check_one_of(key, value, NAT_MODES, file)


def check_cidr(key: str, block: str, file: str | None = None) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(block), strict=True)
    except ValueError:
        raise ConfigError(key, block, "CIDR blocks such as 10.0.0.0/16", file) from None


def check_endpoint_source_ranges(
    key: str, ranges: Sequence[str], file: str | None = None, pod_subnets: Sequence[str] = ()
) -> tuple[str, ...]:
    """`pod_subnets`: where pods get addresses (VPC CNI); a range overlapping one would let a pod of any
    namespace reach the serve port through the NLB, past the NetworkPolicies' namespace selectors."""
    if isinstance(ranges, str) or not isinstance(ranges, Sequence) or not ranges:
        raise ConfigError(key, ranges, "at least one CIDR (who may call the internal endpoint)", file)
    for block in ranges:
        network = check_cidr(key, block, file)
        if network.prefixlen == 0:
            raise ConfigError(key, block, "a network narrower than the whole internet", file)
        if any(network.overlaps(ipaddress.ip_network(p)) for p in pod_subnets):
            pods = yaml_text(pod_subnets)
            allowed = f"CIDR blocks outside the pod subnets {pods} (pods get in through serveClientNamespaces)"
            raise ConfigError(key, block, allowed, file)
    return tuple(ranges)


def check_subnet_ids(key: str, ids: Any, kind: str, file: str | None = None) -> None:
    """Subnet ids: a list of one or more (each perhaps known only at deploy time), not a lone string; a list known
    only at deploy time (another resource's output) is checked by AWS."""
    if ids is None or isinstance(ids, str) or (isinstance(ids, list | tuple) and not ids):
        raise ConfigError(key, ids, f"at least one {kind} subnet id", file)


def check_redis_node_type(key: str, value: str, file: str | None = None) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"cache\.[a-z0-9]+\.[a-z0-9]+", value):
        raise ConfigError(key, value, "an ElastiCache node type such as cache.t4g.small", file)
    return value


def check_redis_replicas(key: str, value: int, file: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 5:
        raise ConfigError(key, value, "0 to 5 read replicas beside the primary", file)
    return value


def check_label_value(key: str, value: str, file: str | None = None) -> str:
    # Kubernetes label values: at most 63 characters, alphanumeric at both ends.
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", value):
        raise ConfigError(key, value, "a label value", file)
    return value


def check_kube_context(key: str, value: str | None, file: str | None = None) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(key, value, "a context name of the kubeconfig, or unset", file)
    return value


def check_kuberay_namespace(
    key: str, value: str | None, install_kuberay: bool, file: str | None = None, install_key: str = "installKubeRay"
) -> str | None:
    """Where a cluster's own KubeRay operator runs (`install_key` false), or None for ours."""
    if value is None:
        return None
    if install_kuberay:
        raise ConfigError(key, value, f"only with {install_key}: false (ours runs in {KUBERAY_NAMESPACE})", file)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
        raise ConfigError(key, value, "a namespace name (DNS-1123 label)", file)
    if value == "default":  # every pod created without a namespace lands there
        raise ConfigError(
            key,
            value,
            "a namespace of the operator's own, not default: the NetworkPolicies open the head's dashboard "
            "(which runs arbitrary code) to every pod of this namespace",
            file,
        )
    return value


def check_instance_type(key: str, value: str, facts: BotocoreFacts, file: str | None = None) -> str:
    if not isinstance(value, str) or not aws_facts.INSTANCE_TYPE_PATTERN.match(value):
        raise ConfigError(key, value, "an EC2 instance type such as g6.8xlarge (family.size)", file)
    if value not in facts.ec2_instance_types:
        known = "an instance type the EC2 API knows (botocore's InstanceType list)"
        slip = did_you_mean(value, facts.ec2_instance_types)
        raise ConfigError(key, value, f"{known};{slip}" if slip else known, file)
    return value


def check_region(key: str, value: str | None, facts: BotocoreFacts, file: str | None = None) -> str:
    """A region of a partition botocore knows (its endpoints file): the partition names the node role's
    trust and the ARNs."""
    if not isinstance(value, str) or facts.region_partition(value) is None:
        regions = facts.known_regions()
        slip = did_you_mean(value, regions) if isinstance(value, str) else ""
        allowed = f"an AWS region botocore knows ({len(regions)}, e.g. us-east-1, eu-west-1)"
        raise ConfigError(key, UNSET if value is None else value, f"{allowed};{slip}" if slip else allowed, file)
    return value


def check_gpu_instance_type(
    key: str,
    value: str,
    facts: BotocoreFacts,
    need_efa: bool = True,
    file: str | None = None,
    table: aws_facts.InstanceTable = aws_facts.INSTANCE_SPECS,
) -> aws_facts.InstanceSpec:
    """A GPU type of `table` (ray_llm_eks/domain/platform/aws_facts.py and the stack's instanceTypes) with
    instance-store NVMe (the model cache), EFA where `need_efa`. A type the table lacks is refused naming the
    types it has that would pass, and the stack key that describes another."""
    check_instance_type(key, value, facts, file)
    spec = table.get(value)
    usable = sorted(t for t, s in table.items() if s.gpus and s.nvme_gb and (s.efa or not need_efa))
    usable_text = f"{'with EFA' if need_efa else 'known'}: {', '.join(usable)}"
    if spec is None:
        raise ConfigError(
            key,
            value,
            f"a GPU instance type of ray_llm_eks/domain/platform/aws_facts.py ({usable_text}), or describe "
            f"{value} in the stack: instanceTypes: {{{value}: {{gpuModel: ..., gpus: ..., gpuMemoryMiB: ..., "
            "vcpus: ..., memoryGiB: ..., nvmeGb: ...}} (docs/configuration.md, instanceTypes)",
            file,
        )
    if not spec.gpus:
        raise ConfigError(key, value, f"an instance type with NVIDIA GPUs; GPU types {usable_text}", file)
    if need_efa and not spec.efa:
        raise ConfigError(
            key,
            value,
            f"a GPU instance type with EFA (a PD pool's nodes move the KV cache over EFA, whichever NIXL backend the "
            f"serve config names; without it, TCP); GPU types {usable_text}",
            file,
        )
    if not spec.nvme_gb:
        raise ConfigError(key, value, "a type with instance-store NVMe (the model cache)", file)
    return spec


def check_count(key: str, value: int, file: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, value, "a count of 0 or more", file)
    return value


def node_sizes(min_size: int | None, desired_size: int | None, max_size: int | None) -> tuple[int, int, int]:
    """A node group's (min, desired, max) where some are left out: desired from min (at least 1), the
    bounds from desired."""
    desired = desired_size if desired_size is not None else max(min_size if min_size is not None else 1, 1)
    return (min_size if min_size is not None else desired, desired, max_size if max_size is not None else desired)


def check_node_group(
    group: str, sizes: Mapping[str, int], disk: tuple[str, int] | None, file: str | None = None, prefix: str = ""
) -> None:
    """One node group's bounds and root volume. `sizes`: min, desired, max in that order and `disk`: the
    root volume's GiB (None: not yet known), each by the name the caller spells it (minSize or min_size);
    `group` is the key of a line about the three bounds together, `prefix` goes before each field's name."""
    for name, value in sizes.items():
        check_count(f"{prefix}{name}", value, file)
    (low_name, low), (desired_name, desired), (high_name, high) = sizes.items()
    if high < 1:
        raise ConfigError(
            f"{prefix}{high_name}", high, f"at least 1 (EKS rejects a node group with {high_name} 0)", file
        )
    if not low <= desired <= high:
        raise ConfigError(group, dict(sizes), f"{low_name} <= {desired_name} <= {high_name}", file)
    if disk is None:
        return
    disk_name, gib = disk
    if isinstance(gib, bool) or not isinstance(gib, int) or not 20 <= gib <= 16384:
        raise ConfigError(f"{prefix}{disk_name}", gib, "20 to 16384 GiB (gp3 root volume)", file)


# An EKS AMI release as the SSM parameter names it (.../amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260903/...).
AMI_RELEASE = r"v\d{8}"
AMI_RELEASE_TEXT = "an EKS AMI release is a v and its date, vYYYYMMDD"


def ami_release_fix(text: str) -> str | None:
    """The release a value without its `v` names (20260903 -> v20260903); None when it is not that slip."""
    return f"v{text}" if re.fullmatch(r"\d{8}", text) else None


# Stack keys whose value YAML may read as a number though the right value is text of another form: the value
# that plans, from the number as written (stackfile's type check names it instead of only "quote it").
NUMBER_SLIPS = {"gpuAmiReleaseVersion": (ami_release_fix, AMI_RELEASE_TEXT)}


def check_ami_pin(keys: tuple[str, str], release: str | None, ami_id: str | None, file: str | None = None) -> None:
    """The GPU AMI, pinned by exactly one of an EKS AL2023 NVIDIA release or an AMI id (`keys` name them)."""
    release_key, id_key = keys
    if (release is None) == (ami_id is None):
        raise ConfigError(
            release_key,
            UNSET if release is None else release,
            f"exactly one of {release_key} (an AL2023 NVIDIA AMI release such as v20261112) or "
            f"{id_key} (ami-...): an unpinned GPU AMI recycles the GPU nodes when AWS publishes a new one",
            file,
        )
    if release is not None and not (isinstance(release, str) and re.fullmatch(AMI_RELEASE, release)):
        fixed = ami_release_fix(str(release))
        allowed = f"{fixed} ({AMI_RELEASE_TEXT})" if fixed else f"{AMI_RELEASE_TEXT}, such as v20261112"
        raise ConfigError(release_key, release, allowed, file)
    if ami_id is not None and not (isinstance(ami_id, str) and re.fullmatch(r"ami-[0-9a-f]{8}([0-9a-f]{9})?", ami_id)):
        raise ConfigError(id_key, ami_id, "an AMI id such as ami-0123456789abcdef0", file)


# arn:<partition>:iam::<account>:role/<path/name> or user/...; EKS access entries take IAM roles and
# users (not sts assumed-role session ARNs) (EKS API CreateAccessEntry, principalArn).
_PRINCIPAL_ARN = re.compile(r"arn:(?P<partition>[a-z-]+):iam::\d{12}:(role|user)/[\w+=,.@/-]{1,512}")


def check_principal_arns(key: str, arns: Sequence[str], partition: str, file: str | None = None) -> tuple[str, ...]:
    """IAM principals that get cluster-admin access entries, in the cluster's partition, each once."""
    if isinstance(arns, str) or not isinstance(arns, Sequence):
        raise ConfigError(key, arns, "a list of IAM role or user ARNs", file)
    for arn in arns:
        match = _PRINCIPAL_ARN.fullmatch(arn) if isinstance(arn, str) else None
        if match is None or match["partition"] != partition:
            raise ConfigError(
                key,
                arn,
                f"IAM role or user ARNs of partition {partition}, such as arn:{partition}:iam::123456789012:role/ci "
                "(not an sts assumed-role ARN)",
                file,
            )
    if len(set(arns)) != len(arns):
        raise ConfigError(key, list(arns), "distinct ARNs (EKS allows one access entry per principal)", file)
    return tuple(arns)


# ACM's certificate ARNs: arn:<partition>:acm:<region>:<account>:certificate/<id>, the id a UUID (ACM API
# reference, CertificateDetail.CertificateArn).
_CERTIFICATE_ARN = re.compile(
    r"arn:(?P<partition>[a-z-]+):acm:(?P<region>[a-z0-9-]+):\d{12}:certificate/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
)


def check_certificate_arn(
    key: str, arn: str, region: str | None = None, partition: str | None = None, file: str | None = None
) -> str:
    """An ACM certificate for the load balancer's TLS listener; `region`/`partition` where known: an NLB takes
    a certificate of its own region only (ACM certificates are regional)."""
    match = _CERTIFICATE_ARN.fullmatch(arn) if isinstance(arn, str) else None
    where = region or "<region>"
    if match is None or (region is not None and (match["region"], match["partition"]) != (region, partition)):
        example = f"arn:{partition or 'aws'}:acm:{where}:123456789012:certificate/<uuid>"
        raise ConfigError(key, arn, f"an ACM certificate ARN of the stack's region, such as {example}", file)
    return arn


def check_public_access_cidrs(key: str, cidrs: Sequence[str], file: str | None = None) -> tuple[str, ...]:
    if isinstance(cidrs, str) or not isinstance(cidrs, Sequence) or not cidrs:
        raise ConfigError(key, cidrs, "at least one CIDR (pulumi reaches the API)", file)
    for block in cidrs:
        if not isinstance(block, str):
            raise ConfigError(key, block, "CIDR strings", file)
        cidr(key, block, file)
    return tuple(cidrs)


def check_service_cidr(key: str, value: str, file: str | None = None) -> str:
    # EKS: the service range must be private, /12 to /24 (and must not overlap the VPC: the caller's check).
    return str(private_cidr(key, value, (12, 24), file))


def check_log_types(
    key: str, log_types: Sequence[str], allowed: Sequence[str], file: str | None = None
) -> tuple[str, ...]:
    if isinstance(log_types, str) or not isinstance(log_types, Sequence):
        raise ConfigError(key, log_types, f"a list of EKS log types {yaml_text(allowed)}", file)
    for log_type in log_types:
        if log_type not in allowed:
            raise ConfigError(key, log_type, f"EKS log types {yaml_text(allowed)}", file)
    return tuple(log_types)


def check_log_retention(key: str, days: int, allowed: Sequence[int], file: str | None = None) -> int:
    if isinstance(days, bool) or days not in allowed:
        raise ConfigError(key, days, f"one of {yaml_text(allowed)}", file)
    return days


def check_system_disk(key: str, gib: int, file: str | None = None) -> int:
    if gib < sizing.SYSTEM_DISK_MIN_GIB:
        raise ConfigError(
            key,
            gib,
            f"at least {sizing.SYSTEM_DISK_MIN_GIB} GiB: the Ray head's serving image (budget "
            f"{'+'.join(map(str, sizing.SERVING_IMAGE_BUDGET_GIB))} GiB compressed+unpacked) and the OS must stay "
            f"under kubelet's 85% image-GC threshold (default {sizing.SYSTEM_DISK_GIB} GiB leaves room for an upgrade)",
            file,
        )
    return gib
