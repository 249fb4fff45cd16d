"""Deploy-time checks that only AWS can answer, run by `pulumi preview`/`up` before any resource is
declared: are the instance types offered where the pools put them, and does the account's
On-Demand vCPU quota cover the pools at their maximum size?

The AWS answers come through Pulumi data sources (components/aws_answers.py). Offline (`make
plan`) the mocks give no answer (None, which AWS never returns for these fields), and the checks
say they were deferred to deploy time instead of pretending to pass.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from domain import aws_facts, sizing
from domain.settings import NodePoolSettings, Settings


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


class PreflightError(ValueError):
    """AWS would refuse the stack: one message with what is asked, what is allowed, what to do."""


class AwsAnswers(Protocol):
    def zones(self) -> set[str] | None:
        """Availability zones of the region that are available to the account; None when unknown."""

    def offered(self, instance_types: list[str]) -> dict[str, set[str]] | None:
        """Zones offering each instance type; None when unknown (offline)."""

    def quota(self, code: str) -> float | None:
        """The applied vCPU quota; None when unknown (offline)."""

    def hardware(self, instance_type: str) -> aws_facts.InstanceSpec | None:
        """vCPUs, memory and max pods of an instance type; None when unknown (offline)."""


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
            f"availabilityZones {missing} are not available zones of {settings.region}; available: {sorted(zones)}"
        )
    return f"ok: zones {wanted} are available in {settings.region}"


def check_offerings(settings: Settings, aws: AwsAnswers) -> str:
    pools = _pools(settings)
    types = sorted({nodes.instance_type for nodes in pools.values()})
    offered = aws.offered(types)
    if offered is None:
        return f"deferred to deploy time: instance types {types} offered in their zones"
    zones = set(settings.network.availability_zones)
    for key, nodes in pools.items():
        where = offered.get(nodes.instance_type, set())
        # GPU nodes must all be in the one GPU zone; system nodes need only one of the zones.
        needed = {settings.network.gpu_availability_zone} if key.startswith("gpuPools") else zones
        if not where & needed:
            raise PreflightError(
                f"{key}.instanceType {nodes.instance_type} is not offered in {sorted(needed)} of {settings.region}; "
                f"zones offering it: {sorted(where) or 'none'} (change gpuAvailabilityZone/availabilityZones "
                "or the instance type)"
            )
    return f"ok: instance types {types} are offered in their zones"


def check_system_node(settings: Settings, aws: AwsAnswers) -> str:
    """The Ray head and system pods fit one system node (a type outside our table: checked here)."""
    instance_type = settings.cluster.system_nodes.instance_type
    hardware = aws.hardware(instance_type)
    if hardware is None:
        return f"deferred to deploy time: the Ray head and system pods fit one {instance_type}"
    need, offered = sizing.system_node_room(hardware)
    if not need.fits_in(offered):
        raise PreflightError(
            f"systemNodes.instanceType {instance_type} is too small for the Ray head and system pods: they need "
            f"{need.cpu_m}m CPU / {need.memory_mib} MiB, one node offers {offered.cpu_m}m / {offered.memory_mib} MiB"
        )
    return f"ok: the Ray head and system pods fit one {instance_type}"


def check_quotas(settings: Settings, aws: AwsAnswers) -> list[str]:
    needs: dict[Quota, list[tuple[str, NodePoolSettings, int]]] = defaultdict(list)
    for key, nodes in _pools(settings).items():
        quota = quota_for(nodes.instance_type)
        if quota is not None:
            hardware = aws.hardware(nodes.instance_type)
            needs[quota].append((key, nodes, None if hardware is None else hardware.vcpus))
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
                f"EC2 quota {quota.code} '{quota.name}' in {settings.region} is {limit:g} vCPUs; the node pools need "
                f"up to {need} at their maxSize ({detail}). Request an increase in Service Quotas or lower maxSize."
            )
        report.append(
            f"ok: {quota.name} ({quota.code}) {need} <= {limit:g} vCPUs (instances already running count too)"
        )
    return report


def run(settings: Settings, aws: AwsAnswers) -> list[str]:
    """All deploy-time checks; raises PreflightError on the first that fails."""
    return [
        check_zones(settings, aws),
        check_offerings(settings, aws),
        check_system_node(settings, aws),
        *check_quotas(settings, aws),
    ]
