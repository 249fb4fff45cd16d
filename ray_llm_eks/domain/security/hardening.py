"""The stack's security switches (docs/security.md): the environment it runs in, NetworkPolicies, who
may reach the serve port and whether it checks API keys. Safe by default; hardening that differs
between environments keys on the `environment` setting, never on the stack's name (users copy `dev`
under other names)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ray_llm_eks.domain.core import address_ranges
from ray_llm_eks.domain.core.config_keys import declared, default
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import DEV_ENVIRONMENTS, PROJECT
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform import field_checks
from ray_llm_eks.domain.platform.field_checks import check_endpoint_source_ranges, check_environment
from ray_llm_eks.domain.platform.subnets import outside_pod_subnets

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class HardeningSettings:
    """The stack's switches; the defaults are the config-key table's."""

    environment: str = default("environment")
    network_policies: bool = default("networkPolicies")  # default-deny ingress in the Ray namespace, enforced
    serve_client_namespaces: tuple[str, ...] = tuple(default("serveClientNamespaces"))  # may call the serve port
    internal_endpoint: bool = default("internalEndpoint")  # an internal NLB in front of the serve port
    endpoint_source_ranges: tuple[str, ...] = ()  # who may reach that NLB (its security group); no pod address
    pod_subnets: tuple[
        str, ...
    ] = ()  # where pods get addresses (ray_llm_eks/domain/platform/subnets.py); none on an existing cluster
    # The internal NLB's subnets (Name tag -> CIDR, ray_llm_eks/domain/platform/subnets.py): with IP targets and no
    # client IP preservation its traffic reaches the pods from its own addresses there, where no pod lives.
    load_balancer_subnets: tuple[tuple[str, str], ...] = ()
    require_ebs_encryption: bool = default("requireEbsEncryption")  # deploy-time check of the region's default
    api_key_check: bool = default("apiKeyCheck")  # the ingress refuses requests without one of the stack's apiKeys
    # The internal NLB's TLS listener: its ACM certificate (port 443, TLS ending at the NLB); None: plain TCP.
    endpoint_certificate_arn: str | None = None
    # The largest request body the key-checking ingress takes (bytes); larger is 413, unread.
    max_request_bytes: int = default("maxRequestBytes")

    @property
    def dev_like(self) -> bool:
        return self.environment in DEV_ENVIRONMENTS


def load(
    raw: RawConfig,
    public_cidrs: tuple[str, ...],
    vpc_cidr: str,
    load_balancer_subnets: dict[str, str],
    pod_subnets: tuple[str, ...],
    existing_cluster: bool,
    region: str,
    partition: str,
) -> HardeningSettings:
    """The stack's security switches; outside a dev-like environment the public API endpoint must be limited to
    networks the stack lists (and the machine running `pulumi up` must be inside them). `pod_subnets`: the
    VPC's subnets where pods get addresses, none where the VPC is not the stack's (existing cluster), where
    there is no internal endpoint either: its NLB needs the AWS Load Balancer Controller, installed only on the
    cluster the stack builds."""
    environment = check_environment("environment", raw.text("environment"))
    # The API endpoint is the cluster's: on a cluster the stack does not make, neither set nor read.
    if environment not in DEV_ENVIRONMENTS and not existing_cluster:
        if not raw.is_set("endpointPublicAccessCidrs"):
            raise ConfigError(
                "endpointPublicAccessCidrs",
                UNSET,
                f"required in environment {environment}: the networks (CIDRs) that may reach the Kubernetes API, "
                "including the machine that runs `pulumi up`",
            )
        if address_ranges.too_wide(public_cidrs):
            raise ConfigError(
                "endpointPublicAccessCidrs",
                list(public_cidrs),
                f"your own networks in environment {environment}: together at most "
                f"{address_ranges.WIDEST_PUBLIC_ADDRESSES:,} addresses (one /8; these reach "
                f"{address_ranges.reach(public_cidrs):,}); wider, in one block or several, is the internet "
                f"(allowed only in {yaml_text(DEV_ENVIRONMENTS)})",
            )
    namespaces = raw.listing("serveClientNamespaces")
    for namespace in namespaces:
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigError("serveClientNamespaces", namespace, "Kubernetes namespace names (DNS-1123 labels)")
    ranges = raw.listing("endpointSourceRanges")
    # No pod address; never empty: LB controller v3.5.0 opens an NLB with none to 0.0.0.0/0 (model_build_managed_sg.go)
    ranges = outside_pod_subnets(vpc_cidr, list(pod_subnets)) if ranges is None else ranges
    ranges = check_endpoint_source_ranges("endpointSourceRanges", ranges, pod_subnets=pod_subnets)
    network_policies = raw.boolean("networkPolicies")
    if not network_policies and environment not in DEV_ENVIRONMENTS:
        raise ConfigError(
            "networkPolicies",
            False,
            f"true in environment {environment}: without them any pod of the cluster reaches the Ray head, its "
            f"dashboard and the GCS (false is allowed only in {yaml_text(DEV_ENVIRONMENTS)})",
        )
    api_key_check = raw.boolean("apiKeyCheck")
    if not api_key_check and environment not in DEV_ENVIRONMENTS:
        raise ConfigError(
            "apiKeyCheck",
            False,
            f"true in environment {environment}: without the check the endpoint serves anyone who reaches it "
            f"(false is allowed only in {yaml_text(DEV_ENVIRONMENTS)})",
        )
    internal_endpoint = raw.boolean("internalEndpoint") and not existing_cluster
    certificate = raw.text("endpointCertificateArn")
    if certificate is not None:
        if not internal_endpoint:
            raise ConfigError(
                "endpointCertificateArn",
                certificate,
                "left out: the stack has no internal endpoint to put it on (internalEndpoint false, or an existing "
                "cluster)",
            )
        field_checks.check_certificate_arn("endpointCertificateArn", certificate, region, partition)
    return HardeningSettings(
        environment,
        network_policies,
        tuple(namespaces),
        internal_endpoint=internal_endpoint,
        endpoint_source_ranges=tuple(ranges),
        pod_subnets=tuple(pod_subnets),
        load_balancer_subnets=tuple(load_balancer_subnets.items()),
        require_ebs_encryption=raw.boolean("requireEbsEncryption"),
        api_key_check=api_key_check,
        endpoint_certificate_arn=certificate,
        max_request_bytes=_max_request_bytes(raw.integer("maxRequestBytes")),
    )


# At least what a model's longest prompt takes as JSON (64 KiB); at most 1 GiB, which no chat request needs.
REQUEST_BYTES_RANGE = (64 * 2**10, 2**30)


def _max_request_bytes(value: int) -> int:
    low, high = REQUEST_BYTES_RANGE
    if not low <= value <= high:
        raise ConfigError("maxRequestBytes", value, f"a number of bytes from {low} to {high}")
    return value


def security_switches() -> dict[str, str]:
    """The boolean keys that turn a protection off when false (their `when_off` in the config-key table: what is lost),
    each with its HardeningSettings field: the key in snake case (networkPolicies -> network_policies)."""
    return {
        key: re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower() for key, entry in declared().items() if "when_off" in entry
    }


def switched_off(hardening: HardeningSettings, api_keys_set: bool) -> list[str]:
    """One line per security switch the stack turns off, for `make plan` and `pulumi up` to say (a stack file
    may turn one off without anyone noticing: a YAML `no` used to)."""
    lines = []
    for key, field in security_switches().items():
        if not getattr(hardening, field):
            unused = "; its apiKeys are not used" if key == "apiKeyCheck" and api_keys_set else ""
            off = " ".join(declared()[key]["when_off"].split())
            lines.append(f"{PROJECT}:{key} is false: {off} (environment {hardening.environment}){unused}")
    return lines
