"""Values that documentation reserves to stand for the reader's own: a stack that still holds one was copied
from an example and not finished. `make plan` plans it and warns (the shipped prod stack names a documentation
range for "your office": CI plans it), `pulumi preview` and `pulumi up` refuse it: an EKS API endpoint open only
to 203.0.113.0/24 is one that nobody, the machine running `pulumi up` included, can reach.

    lines = check(settings, deploying)   # the warnings to print; raises the first ConfigError when deploying
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ray_llm_eks.domain.core.errors import ConfigError, refused_when_deploying
from ray_llm_eks.domain.stack.settings import Settings

# Address blocks reserved for documentation, never routed on the internet: RFC 5737 section 3 (IPv4
# TEST-NET-1..3) and RFC 3849 (IPv6).
DOCUMENTATION_NETWORKS = {
    "192.0.2.0/24": "RFC 5737 TEST-NET-1",
    "198.51.100.0/24": "RFC 5737 TEST-NET-2",
    "203.0.113.0/24": "RFC 5737 TEST-NET-3",
    "2001:db8::/32": "RFC 3849",
}
# The account id of the example ARNs in AWS's documentation (IAM user guide, "IAM identifiers"): no one's.
DOCUMENTATION_ACCOUNT = "123456789012"
# The AMI id this project's own messages give as an example of the form (field_checks.check_ami_pin).
EXAMPLE_AMI_ID = "ami-0123456789abcdef0"


def _documentation_range(block: str) -> str | None:
    """The reserving document of a CIDR inside a documentation block, or None."""
    network = ipaddress.ip_network(block, strict=False)
    for reserved, source in DOCUMENTATION_NETWORKS.items():
        documented = ipaddress.ip_network(reserved)
        if network.version == documented.version and network.subnet_of(documented):
            return source
    return None


def _cidrs(key: str, blocks: Iterable[str], whose: str) -> list[ConfigError]:
    found = []
    for block in blocks:
        source = _documentation_range(block)
        if source is not None:
            allowed = f"the CIDRs of {whose}, not a documentation range ({source}) standing for them"
            found.append(ConfigError(key, block, allowed))
    return found


def found(settings: Settings) -> list[ConfigError]:
    """Every placeholder value the stack holds, as the line that refuses it."""
    errors = _cidrs(
        "endpointPublicAccessCidrs",
        settings.cluster.public_access_cidrs,
        "the networks that may reach the Kubernetes API, the machine running `pulumi up` among them (its public "
        "address as a /32: curl -s https://checkip.amazonaws.com)",
    )
    errors += _cidrs(
        "endpointSourceRanges", settings.hardening.endpoint_source_ranges, "the internal endpoint's clients"
    )
    for arn in settings.cluster.admin_principal_arns:
        if f"::{DOCUMENTATION_ACCOUNT}:" in arn:
            errors.append(
                ConfigError(
                    "clusterAdmins",
                    arn,
                    f"an ARN of your own account: {DOCUMENTATION_ACCOUNT} is the example account of AWS's docs",
                )
            )
    amis = {pool.ami.ami_id for pool in settings.gpu_pools.values()}
    if EXAMPLE_AMI_ID in amis:
        errors.append(
            ConfigError("gpuAmiId", EXAMPLE_AMI_ID, "the id of a real AL2023 NVIDIA AMI in the region, not the example")
        )
    return errors


def check(settings: Settings, deploying: bool) -> list[str]:
    """Refuse the first placeholder when deploying; while planning, a warning per placeholder."""
    return refused_when_deploying(found(settings), deploying, "`make plan` goes on, `pulumi up` refuses it")
