"""The checks a stack key and a component's Args field share (one rule, one line, either way in): the
Kubernetes names, bounds and choices the service's objects need, the cluster's name and the VPC's layout.
`key` is the stack key or the Args field; `file` names the Args type where the value came from a component's
caller (domain/errors.py line())."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from domain.errors import ConfigError, yaml_text
from domain.facts import ENVIRONMENTS, EXACT_CHART_VERSION, KUBERAY_NAMESPACE, NAT_MODES
from domain.versions import KUBERNETES_VERSIONS

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


def check_endpoint_source_ranges(key: str, ranges: Sequence[str], file: str | None = None) -> tuple[str, ...]:
    if isinstance(ranges, str) or not isinstance(ranges, Sequence) or not ranges:
        raise ConfigError(key, ranges, "at least one CIDR (who may call the internal endpoint)", file)
    for block in ranges:
        try:
            network = ipaddress.ip_network(str(block), strict=True)
        except ValueError:
            raise ConfigError(key, block, "CIDR blocks such as 10.0.0.0/16", file) from None
        if network.prefixlen == 0:
            raise ConfigError(key, block, "a network narrower than the whole internet", file)
    return tuple(ranges)


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
