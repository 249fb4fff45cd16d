"""Deploy-time checks that only AWS can answer, run by `pulumi preview`/`up` before any resource is
declared: are the instance types offered where the pools put them, and does the account's
On-Demand vCPU quota cover the pools at their maximum size?

The AWS answers come through Pulumi data sources (ray_llm_eks/adapters/aws_answers.py). Offline (`make
plan`) the mocks give no answer (None, which AWS never returns for these fields), and the checks
say they were deferred to deploy time instead of pretending to pass.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Protocol

from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.platform import aws_facts, sizing, versions
from ray_llm_eks.domain.render import karpenter
from ray_llm_eks.domain.stack.settings import NodePoolSettings, Settings
from ray_llm_eks.domain.telemetry import monitoring_release


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


# EC2 On-Demand vCPU quotas (Service Quotas, service code "ec2"), by instance family letter.
G_AND_VT = Quota("L-DB2E81BA", "Running On-Demand G and VT instances")
P_INSTANCES = Quota("L-417A185B", "Running On-Demand P instances")
STANDARD = Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def quota_for(instance_type: str) -> Quota | None:
    letters = re.match(r"[a-z]+", instance_type).group(0)
    if letters.startswith("vt") or letters.startswith("g"):
        return G_AND_VT
    if letters.startswith("p"):
        return P_INSTANCES
    if letters[0] in "acdhimrtz" and letters not in ("inf", "trn", "dl", "hpc"):
        return STANDARD
    return None  # other quota families (X, high memory, Inf, Trn, ...): not checked here


class PreflightError(ConfigError):
    """AWS would refuse the stack: the same one line as any bad value (the key, its value, what AWS allows
    and what to do), found only by asking AWS."""


class AwsAnswers(Protocol):
    def zones(self) -> set[str] | None:
        """Availability zones of the region that are available to the account; None when unknown."""

    def offered(self, instance_types: list[str]) -> dict[str, set[str]] | None:
        """Zones offering each instance type; None when unknown (offline)."""

    def quota(self, code: str) -> float | None:
        """The applied vCPU quota; None when unknown (offline)."""

    def hardware(self, instance_type: str) -> aws_facts.InstanceSpec | None:
        """vCPUs, memory, max pods, GPUs, instance store and EFA of an instance type; None when unknown
        (offline)."""

    def cluster_exists(self, name: str) -> bool | None:
        """Whether an EKS cluster of that name runs in the region; None when unknown (offline)."""

    def caller_arn(self) -> str | None:
        """The ARN of the identity running `pulumi up`; None when unknown (offline)."""

    def ebs_encrypted_by_default(self) -> bool | None:
        """Whether new EBS volumes of the region are encrypted by default; None when unknown (offline)."""

    def bucket_region(self, bucket: str) -> str | None:
        """The region an S3 bucket lives in; None when unknown (offline)."""


def _pools(settings: Settings) -> dict[str, NodePoolSettings]:
    return {"systemNodes": settings.cluster.system_nodes} | {
        f"gpuPools.{role}": pool.nodes for role, pool in settings.gpu_pools.items()
    }


def check_zones(settings: Settings, aws: AwsAnswers) -> str:
    zones = aws.zones()
    wanted = list(settings.network.availability_zones)
    if zones is None:
        return f"deferred to deploy time: zones {wanted} exist in {settings.region}"
    missing = [z for z in wanted if z not in zones]
    if missing:
        raise PreflightError(
            "availabilityZones",
            missing,
            f"zones available to this account in {settings.region}: {yaml_text(sorted(zones))}",
        )
    return f"ok: zones {wanted} are available in {settings.region}"


def _node_types(settings: Settings) -> dict[str, list[str]]:
    """What each pool's nodes may be: its instance type, or with Karpenter every type that fits the pool."""
    return {key: [nodes.instance_type] for key, nodes in _pools(settings).items()} | {
        f"gpuPools.{name}": karpenter.pool_instance_types(pool, settings.node_provisioning)
        for name, pool in settings.gpu_pools.items()
    }


def check_offerings(settings: Settings, aws: AwsAnswers) -> str:
    pools, node_types = _pools(settings), _node_types(settings)
    types = sorted({t for choices in node_types.values() for t in choices})
    offered = aws.offered(types)
    if offered is None:
        return f"deferred to deploy time: instance types {types} offered in their zones"
    zones = set(settings.network.availability_zones)
    for key, nodes in pools.items():
        where = set().union(*(offered.get(t, set()) for t in node_types[key]))
        # GPU nodes must all be in the one GPU zone; system nodes need only one of the zones.
        needed = {settings.network.gpu_availability_zone} if key.startswith("gpuPools") else zones
        if not where & needed:
            raise PreflightError(
                f"{key}.instanceType",
                nodes.instance_type,
                f"a type offered in {yaml_text(sorted(needed))} of {settings.region}; zones offering it: "
                f"{yaml_text(sorted(where)) if where else 'none'} (change gpuAvailabilityZone/availabilityZones "
                "or the instance type)",
            )
    return f"ok: instance types {types} are offered in their zones"


def check_system_node(settings: Settings, aws: AwsAnswers) -> str:
    """The Ray head and system pods fit one system node (a type outside our table: checked here)."""
    instance_type = settings.cluster.system_nodes.instance_type
    hardware = aws.hardware(instance_type)
    if hardware is None:
        return f"deferred to deploy time: the Ray head and system pods fit one {instance_type}"
    pods = monitoring_release.system_pods(settings.serving.observability)
    if settings.node_provisioning.by_karpenter:  # its controller runs there too
        pods = {**pods, "karpenter": sizing.KARPENTER_REQUESTS}
    need, offered = sizing.system_node_room(hardware, pods)
    if not need.fits_in(offered):
        raise PreflightError(
            "systemNodes.instanceType",
            instance_type,
            f"a type with room for the Ray head and system pods: they need {need.cpu_m}m CPU / {need.memory_mib} MiB, "
            f"one {instance_type} offers {offered.cpu_m}m / {offered.memory_mib} MiB",
        )
    return f"ok: the Ray head and system pods fit one {instance_type}"


def check_quotas(settings: Settings, aws: AwsAnswers) -> list[str]:
    needs: dict[Quota, list[tuple[str, NodePoolSettings, int]]] = defaultdict(list)
    node_types = _node_types(settings)
    for key, nodes in _pools(settings).items():
        quota = quota_for(nodes.instance_type)
        if quota is not None:
            # Karpenter may make any type that fits the pool: the largest counts (the shown type).
            hardware = [aws.hardware(t) for t in node_types[key]]
            largest = None if None in hardware else max(hardware, key=lambda h: h.vcpus)
            shown = nodes if largest is None else replace(nodes, instance_type=node_types[key][hardware.index(largest)])
            needs[quota].append((key, shown, None if largest is None else largest.vcpus))
    report = []
    for quota, uses in needs.items():
        if any(vcpus is None for *_, vcpus in uses):
            report.append(f"deferred to deploy time: {quota.name} ({quota.code}) vCPU quota")
            continue
        need = sum(nodes.max_size * vcpus for _, nodes, vcpus in uses)
        detail = " + ".join(f"{key} {nodes.max_size} x {nodes.instance_type} x {vcpus}" for key, nodes, vcpus in uses)
        limit = aws.quota(quota.code)
        if limit is None:
            report.append(f"deferred to deploy time: {quota.name} ({quota.code}) >= {need} vCPUs ({detail})")
            continue
        if need > limit:
            raise PreflightError(
                f"{uses[0][0]}.maxSize",
                uses[0][1].max_size,
                f"pools within EC2 quota {quota.code} ({quota.name}) in {settings.region}, {limit:g} vCPUs: they need "
                f"up to {need} at their maxSize ({detail}); request an increase in Service Quotas or lower maxSize",
            )
        report.append(
            f"ok: {quota.name} ({quota.code}) {need} <= {limit:g} vCPUs (instances already running count too)"
        )
    return report


def check_kubernetes_support(settings: Settings, aws: AwsAnswers, day: date) -> str:
    """A new cluster needs a version with standard support left; a running one is warned, not
    refused, so a fix unrelated to the version can still be deployed."""
    version = settings.cluster.kubernetes_version
    ends = versions.KUBERNETES_VERSIONS[version]
    if ends is None:
        return f"ok: Kubernetes {version} has no announced end of standard support"
    min_days = versions.NEW_CLUSTER_MIN_SUPPORT_DAYS
    cost = "then the control plane costs $0.60/h instead of $0.10/h (extended support)"
    if ends - day > timedelta(days=min_days):
        return f"ok: Kubernetes {version} is in standard support until {ends}"
    exists = aws.cluster_exists(settings.cluster.name)
    if exists is None:
        return (
            f"warning: Kubernetes {version} leaves standard support on {ends}; {cost}. A new cluster will be refused "
            f"at deploy time (fewer than {min_days} days left); an existing one is warned. Upgrade kubernetesVersion."
        )
    if not exists:
        later = [v for v, e in versions.KUBERNETES_VERSIONS.items() if e is None or e > ends]
        raise PreflightError(
            "kubernetesVersion",
            version,
            f"one of {yaml_text(later)} for a new cluster: standard support of {version} ends {ends}, fewer than "
            f"{min_days} days after {day}; {cost}",
        )
    return f"warning: cluster {settings.cluster.name} runs Kubernetes {version}, standard support ends {ends}; {cost}"


def check_cluster_admins(settings: Settings, aws: AwsAnswers) -> str:
    """EKS refuses an access entry for the principal that created the cluster (pulumi-eks makes it
    admin already), and so would this stack's first `up`."""
    admins = settings.cluster.admin_principal_arns
    if not admins:
        return "ok: only the identity that creates the cluster is admin (clusterAdmins is empty)"
    caller = aws.caller_arn()
    if caller is None:
        return f"deferred to deploy time: clusterAdmins {list(admins)} does not list the deploying identity"
    deployer = principal_of(caller)
    if any(same_principal(admin, deployer) for admin in admins):
        raise PreflightError(
            "clusterAdmins",
            list(admins),
            f"principals other than {deployer}, the identity running this deployment: it is cluster admin already "
            "(pulumi-eks bootstrapClusterCreatorAdminPermissions) and EKS refuses a second access entry for it",
        )
    return f"ok: clusterAdmins {list(admins)} get cluster-admin access entries"


def principal_of(caller_arn: str) -> str:
    """The IAM principal behind a caller ARN: an sts assumed-role session maps to its role."""
    match = re.fullmatch(r"arn:([a-z-]+):sts::(\d{12}):assumed-role/([^/]+)/.+", caller_arn)
    if match is None:
        return caller_arn
    partition, account, role = match.groups()
    return f"arn:{partition}:iam::{account}:role/{role}"


def same_principal(admin_arn: str, principal_arn: str) -> bool:
    """A session ARN has no role path: arn:...:role/team/ci and arn:...:role/ci are one role."""
    head_a, _, name_a = admin_arn.partition(":role/")
    head_b, _, name_b = principal_arn.partition(":role/")
    if name_a and name_b:
        return head_a == head_b and name_a.rsplit("/", 1)[-1] == name_b.rsplit("/", 1)[-1]
    return admin_arn == principal_arn


def check_weights_bucket(settings: Settings, aws: AwsAnswers) -> list[str]:
    """Weights in S3 must be in the stack's region: the VPC's gateway endpoint serves only buckets of
    its own region, anything else goes through the NAT at its per-GB price and cross-region transfer."""
    report = []
    for uri in settings.serving.weights_s3_uris:
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        where = aws.bucket_region(bucket)
        if where is None:
            report.append(f"deferred to deploy time: bucket {bucket} of the weights is in {settings.region}")
        elif where != settings.region:
            raise PreflightError(
                "modelSource",
                uri,
                f"a bucket in {settings.region}, the stack's region ({bucket} is in {where}): copy the weights there "
                "(the VPC's S3 gateway endpoint serves its own region only)",
            )
        else:
            report.append(f"ok: bucket {bucket} of the weights is in {settings.region}")
    return report


# What a stack's own instance type declares (ray_llm_eks/domain/platform/instance_types.py) that EC2 describes too.
_DESCRIBED = {
    "gpus": "gpus",
    "gpu_memory_mib": "gpuMemoryMiB",
    "vcpus": "vcpus",
    "memory_gib": "memoryGiB",
    "nvme_gb": "nvmeGb",
    "efa": "efa",
}


def check_own_instance_types(settings: Settings, aws: AwsAnswers) -> list[str]:
    """Each instance type the stack describes itself (instanceTypes), held against EC2's own description of it:
    the fit, the pods' sizes and the EFA devices rest on those figures."""
    own = sorted(t for t in settings.instance_types if t not in aws_facts.INSTANCE_SPECS)
    lines = []
    for name in own:
        declared, described = settings.instance_types[name], aws.hardware(name)
        if described is None:
            lines.append(f"deferred to deploy time: instanceTypes.{name} as EC2 describes {name}")
            continue
        for field, key in _DESCRIBED.items():
            if getattr(declared, field) != getattr(described, field):
                raise PreflightError(
                    f"instanceTypes.{name}.{key}",
                    getattr(declared, field),
                    f"{yaml_text(getattr(described, field))}, as EC2 describes {name} (aws ec2 "
                    f"describe-instance-types --instance-types {name})",
                )
        lines.append(f"ok: instanceTypes.{name} is as EC2 describes it")
    return lines


def check_ebs_encryption(settings: Settings, aws: AwsAnswers) -> str:
    """Node root volumes follow the region's EBS encryption default (pulumi-eks's launch template
    cannot set `encrypted`); the stack checks it instead of changing an account-wide setting."""
    what = f"EBS encryption by default is on in {settings.region} (node root volumes encrypted)"
    if not settings.hardening.require_ebs_encryption:
        return f"skipped (requireEbsEncryption: false): {what}"
    enabled = aws.ebs_encrypted_by_default()
    if enabled is None:
        return f"deferred to deploy time: {what}"
    if not enabled:
        raise PreflightError(
            "requireEbsEncryption",
            True,
            f"false, or EBS encryption by default on in {settings.region} (it is off: the nodes' root volumes would "
            "be unencrypted); turn it on for the region (every new EBS volume of the account there): "
            f"aws ec2 enable-ebs-encryption-by-default --region {settings.region}",
        )
    return f"ok: {what}"


def run(settings: Settings, aws: AwsAnswers, day: date) -> list[str]:
    """All deploy-time checks; raises PreflightError on the first that fails."""
    return [
        check_kubernetes_support(settings, aws, day),
        check_cluster_admins(settings, aws),
        check_zones(settings, aws),
        check_offerings(settings, aws),
        *check_own_instance_types(settings, aws),
        check_system_node(settings, aws),
        *check_quotas(settings, aws),
        *check_weights_bucket(settings, aws),
        check_ebs_encryption(settings, aws),
    ]
