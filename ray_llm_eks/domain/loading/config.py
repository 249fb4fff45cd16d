"""Stack configuration: read once into frozen dataclasses and validated before any resource exists.

Every key lives in the `ray-llm-eks:` namespace and is listed in ray_llm_eks/domain/data/config_keys.yaml
(ray_llm_eks/domain/core/config_keys.py refuses any other). Each section is read by one function of one
signature, `load(raw, ...)`: the stack's values (RawConfig) first, then what the sections before it settled;
load_settings calls them in order, one forward pass, and is the one place that lists them. The network, the
cluster and the node pools are read here. Any bad value raises ConfigError naming the key, the value and
what is allowed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ray_llm_eks.domain.checks import known_issues
from ray_llm_eks.domain.cluster import deploy_mode, gcs_ft, node_provisioning, upgrades
from ray_llm_eks.domain.cluster.deploy_mode import DeployMode
from ray_llm_eks.domain.core.errors import UNSET, ConfigError, mapping_of, refused_when_deploying, yaml_text
from ray_llm_eks.domain.core.facts import GPU_ROLES
from ray_llm_eks.domain.core.raw_config import Getter, RawConfig, check_fields
from ray_llm_eks.domain.fit import roles
from ray_llm_eks.domain.loading.serving_config import serving_settings
from ray_llm_eks.domain.platform import aws_facts, field_checks, instance_types, pins, prices, sizing, subnets
from ray_llm_eks.domain.platform.aws_facts import BotocoreFacts
from ray_llm_eks.domain.render import alert_rules
from ray_llm_eks.domain.security import hardening as hardening_section
from ray_llm_eks.domain.security.hardening import switched_off
from ray_llm_eks.domain.serving import model_table
from ray_llm_eks.domain.serving.serve_config import OwnServeFile
from ray_llm_eks.domain.stack import cost
from ray_llm_eks.domain.stack.settings import (
    AmiPin,
    ClusterSettings,
    GpuPoolSettings,
    NetworkSettings,
    NodePoolSettings,
    Settings,
)
from ray_llm_eks.domain.telemetry import alerts, monitoring_release, observability, slo
from ray_llm_eks.domain.telemetry.observability import ObservabilitySettings

POOL_FIELDS = {"instanceType": str, "minSize": int, "desiredSize": int, "maxSize": int, "diskSizeGiB": int}
GPU_POOLS_SHAPE = mapping_of(
    [*POOL_FIELDS, "serves"], by=f"pool names (roles {yaml_text(GPU_ROLES)}, or any name with `serves: <role>`)"
)


def _node_pool(key: str, raw: Any, default_disk: int, facts: BotocoreFacts) -> NodePoolSettings:
    raw = check_fields(key, raw, POOL_FIELDS, required=("instanceType",))
    low, desired, high = field_checks.node_sizes(raw.get("minSize"), raw.get("desiredSize"), raw.get("maxSize"))
    pool = NodePoolSettings(
        instance_type=raw["instanceType"],
        min_size=low,
        desired_size=desired,
        max_size=high,
        disk_size_gib=raw.get("diskSizeGiB", default_disk),
    )
    field_checks.check_instance_type(f"{key}.instanceType", pool.instance_type, facts)
    sizes = {"minSize": pool.min_size, "desiredSize": pool.desired_size, "maxSize": pool.max_size}
    field_checks.check_node_group(key, sizes, ("diskSizeGiB", pool.disk_size_gib), prefix=f"{key}.")
    return pool


# ---------------------------------------------------------------------------------------------
# The settings, key by key


def _network(raw: RawConfig, region: str, cluster_name: str) -> NetworkSettings:
    vpc = field_checks.check_vpc_cidr("vpcCidr", raw.text("vpcCidr"))
    azs = raw.listing("availabilityZones", [f"{region}a", f"{region}b"])
    zones = field_checks.check_availability_zones("availabilityZones", azs, region)
    gpu_az = field_checks.check_gpu_availability_zone(
        "gpuAvailabilityZone", raw.text("gpuAvailabilityZone", azs[0]), zones
    )
    nat = field_checks.check_nat_gateways("natGateways", raw.text("natGateways"))
    return NetworkSettings(cluster_name, vpc, zones, gpu_az, nat)


def _kubernetes_version(raw: RawConfig) -> str:
    """A version EKS offers; whether its standard support has ended is a deploy-time check
    (preflight.check_kubernetes_support), since it depends on whether the cluster exists already."""
    return field_checks.check_kubernetes_version("kubernetesVersion", raw.text("kubernetesVersion"))


def _cluster_admins(raw: RawConfig, region: str, facts: BotocoreFacts) -> tuple[str, ...]:
    """IAM principals that get cluster-admin access entries (teammates, CI). The identity that runs
    the first `up` is admin already (pulumi-eks bootstrapClusterCreatorAdminPermissions) and must not
    be listed again: EKS refuses a second access entry for it (checked at deploy time)."""
    arns = raw.listing("clusterAdmins")
    return field_checks.check_principal_arns("clusterAdmins", arns, facts.region_partition(region))


def _cluster(
    raw: RawConfig, name: str, region: str, vpc_cidr: str, facts: BotocoreFacts, obs: ObservabilitySettings
) -> ClusterSettings:
    public_cidrs = field_checks.check_public_access_cidrs(
        "endpointPublicAccessCidrs", raw.listing("endpointPublicAccessCidrs")
    )
    service = field_checks.check_service_cidr("serviceCidr", raw.text("serviceCidr"))
    if ipaddress.IPv4Network(service).overlaps(ipaddress.IPv4Network(vpc_cidr)):
        raise ConfigError("serviceCidr", service, f"a block that does not overlap vpcCidr {vpc_cidr}")
    log_types = field_checks.check_log_types("clusterLogTypes", raw.listing("clusterLogTypes"), facts.eks_log_types)
    retention = field_checks.check_log_retention(
        "clusterLogRetentionDays", raw.integer("clusterLogRetentionDays"), facts.log_retention_days
    )
    system = _node_pool(
        "systemNodes",
        raw.mapping("systemNodes", mapping_of(POOL_FIELDS)),
        # the Ray head pulls the serving image: ray_llm_eks/domain/platform/sizing.py
        default_disk=sizing.SYSTEM_DISK_GIB,
        facts=facts,
    )
    field_checks.check_system_disk("systemNodes.diskSizeGiB", system.disk_size_gib)
    _system_node_fits(system, obs)
    return ClusterSettings(
        name=name,
        kubernetes_version=_kubernetes_version(raw),
        admin_principal_arns=_cluster_admins(raw, region, facts),
        public_access_cidrs=public_cidrs,
        service_cidr=service,
        log_types=log_types,
        log_retention_days=retention,
        addon_versions=tuple(sorted(pins.load_addon_versions(raw.mapping(pins.KEY, pins.SHAPE)).items())),
        system_nodes=system,
    )


def _system_node_fits(system: NodePoolSettings, obs: ObservabilitySettings) -> None:
    """The Ray head, CoreDNS, the operator and our monitoring share one system node. An instance type
    outside our table is checked at deploy time instead (preflight.check_system_node)."""
    spec = aws_facts.INSTANCE_SPECS.get(system.instance_type)
    if spec is None:
        return
    monitoring = monitoring_release.system_pods(obs)
    need, offered = sizing.system_node_room(spec, monitoring)
    if not need.fits_in(offered):
        roomy = next(
            t
            for t in ("m7i.xlarge", "m7i.2xlarge", "m7i.4xlarge", "m7i.8xlarge")
            if need.fits_in(sizing.allocatable(aws_facts.INSTANCE_SPECS[t]))
        )
        raise ConfigError(
            "systemNodes.instanceType",
            system.instance_type,
            f"a type with room for the Ray head and system pods{' and the monitoring' if monitoring else ''}: they "
            f"need {need.cpu_m}m CPU / {need.memory_mib} MiB, one {system.instance_type} offers {offered.cpu_m}m / "
            f"{offered.memory_mib} MiB (e.g. {roomy})",
        )


def _ami_pin(raw: RawConfig) -> AmiPin:
    release, ami_id = raw.text("gpuAmiReleaseVersion"), raw.text("gpuAmiId")
    field_checks.check_ami_pin(("gpuAmiReleaseVersion", "gpuAmiId"), release, ami_id)
    return AmiPin(release_version=release, ami_id=ami_id)


def _gpu_pools(
    raw: RawConfig,
    network: NetworkSettings,
    version: str,
    facts: BotocoreFacts,
    table: aws_facts.InstanceTable,
    existing_cluster: bool,
) -> dict[str, GpuPoolSettings]:
    """The GPU pools; on an existing cluster they describe its node groups, whose AMI is its own (none pinned)."""
    pools_raw = raw.mapping("gpuPools", GPU_POOLS_SHAPE)
    if not pools_raw:
        raise ConfigError("gpuPools", pools_raw, GPU_POOLS_SHAPE)
    ami = (
        _ami_pin(raw)
        if not existing_cluster or raw.is_set("gpuAmiReleaseVersion") or raw.is_set("gpuAmiId")
        else AmiPin()
    )
    pools = {}
    for name, pool_raw in pools_raw.items():
        serves = roles.pool_serves(name, pool_raw)
        sizes = {k: v for k, v in pool_raw.items() if k != "serves"}
        nodes = _node_pool(f"gpuPools.{name}", sizes, default_disk=sizing.GPU_DISK_GIB, facts=facts)
        spec = field_checks.check_gpu_instance_type(
            f"gpuPools.{name}.instanceType",
            nodes.instance_type,
            facts,
            need_efa=GpuPoolSettings.needs_efa(serves or name),
            table=table,
        )
        zone = network.gpu_availability_zone
        pools[name] = GpuPoolSettings(name, nodes, spec, zone, version, ami, serves, frozenset(pool_raw))
    return pools


def load_deploy_mode(get: Getter) -> DeployMode:
    """The deploy mode alone (ray_llm_eks/domain/cluster/deploy_mode.py), its keys read as load_settings reads them."""
    return deploy_mode.load(RawConfig(get))


def load_settings(
    get: Getter, stack: str, region: str | None, facts: BotocoreFacts, own_serve: OwnServeFile | None = None
) -> Settings:
    """Build and check the whole Settings from raw stack values (`get(key)` -> str or None; a secret
    key's value is only a marker: Settings records whether it is set, never what it is) and
    botocore's facts. ray_llm_eks/adapters/stack.py is the one caller outside tests."""
    raw = RawConfig(get)
    region = field_checks.check_region("aws:region", region, facts)
    if facts.ec2_service_principal(region) is None:
        raise ConfigError(
            "aws:region",
            region,
            "a region of a partition whose EC2 service principal we know "
            f"{yaml_text(sorted(aws_facts.EC2_SERVICE_PRINCIPAL))} "
            f"(the node role's trust policy); {region} is in {facts.region_partition(region)}",
        )

    name = field_checks.check_cluster_name("clusterName", raw.text("clusterName", f"ray-llm-{stack}"))
    mode = deploy_mode.load(raw)

    network = _network(raw, region, name)
    obs = observability.load(raw, existing_cluster=mode.existing_cluster)
    cluster = _cluster(raw, name, region, network.vpc_cidr, facts, obs)
    table = instance_types.load(raw, facts)
    pools = _gpu_pools(raw, network, cluster.kubernetes_version, facts, table, mode.existing_cluster)
    price_overrides = prices.load(raw)
    prices_here = cost.instance_prices(region, price_overrides)
    serving, pools = serving_settings(raw, region, pools, facts, obs, prices_here, table, own_serve)
    hardening = hardening_section.load(
        raw,
        public_cidrs=cluster.public_access_cidrs,
        vpc_cidr=network.vpc_cidr,
        load_balancer_subnets=subnets.load_balancer_subnets(
            network.cluster_name, network.vpc_cidr, network.availability_zones
        ),
        pod_subnets=()
        if mode.existing_cluster
        else tuple(subnets.pod_subnet_cidrs(network.vpc_cidr, len(network.availability_zones))),
        existing_cluster=mode.existing_cluster,
        region=region,
        partition=facts.region_partition(region),
    )
    if not hardening.api_key_check and serving.serve_document.selective_pd:
        # Its decode server reaches the pods with the key-checking ingress's code
        # (ray_llm_eks/domain/serving/api_keys.py).
        raise ConfigError("selectivePd", raw.text("selectivePd"), "off while apiKeyCheck is false")
    settings = Settings(
        region=region,
        stack=stack,
        network=network,
        cluster=cluster,
        gpu_pools=pools,
        instance_types=table,
        serving=serving,
        prices=price_overrides,
        hardening=hardening,
        slo=slo.load(raw),
        alerts=alerts.load(raw, serving.roles, alert_rules.pool_types(pools)),
        hf_token_set=get("hfToken") is not None,
        api_keys_set=get("apiKeys") is not None,
        ray_auth_token_set=get("rayAuthToken") is not None,
        deploy_mode=mode,
        **_resilience(raw, hardening.environment, pools, mode.existing_cluster),
        node_provisioning=node_provisioning.load(raw, cluster.name),
    )
    node_provisioning.check_pools(settings.node_provisioning, [n for n, p in pools.items() if p.efa])
    known_issues.refuse(settings)  # upstream bugs the stack would hit (ray_llm_eks/domain/data/known_issues.yaml)
    return settings


def _resilience(raw: RawConfig, environment: str, pools: Mapping[str, GpuPoolSettings], existing_cluster: bool) -> dict:
    """GCS fault tolerance as the deploy mode allows it, the upgrade strategy (ray_llm_eks/domain/cluster/: gcs_ft,
    upgrades)."""
    sizes = {role: (p.nodes.desired_size, p.nodes.max_size) for role, p in pools.items()}
    return {"gcs_ft": gcs_ft.load(raw, environment, existing_cluster), "upgrade_strategy": upgrades.load(raw, sizes)}


def secret_checks(settings: Settings, deploying: bool) -> list[str]:
    """What the stack's secrets decide before deploying: a gated model without hfToken is refused (a warning while
    only planning). An endpoint that checks keys but has none gets one generated at `pulumi up` (LlmService), said
    while planning. Returns the warnings, then a line per security switch turned off."""
    refusals = []
    gated = model_table.gated_models(settings.serving.serve_document)
    if not settings.hf_token_set and gated:
        refusals.append(
            ConfigError("hfToken", UNSET, f"set it (pulumi config set --secret hfToken hf_...): {gated[0]} is gated")
        )
    # Not yet set is the normal state of a stack before `make stack`: a warning that says so, not a refusal.
    warnings = refused_when_deploying(refusals, deploying, "`make plan` goes on without it, `pulumi up` will refuse")
    if settings.hardening.api_key_check and not settings.api_keys_set and not deploying:
        warnings.append(
            f"apiKeys is not set: `pulumi up` generates one key, a secret ({GENERATED_KEY_READ}); or set your own: "
            'pulumi config set --secret apiKeys "$(openssl rand -hex 24)" (docs/security.md)'
        )
    return warnings + switched_off(settings.hardening, settings.api_keys_set)


# Where a key the stack generated is read (the stack output __main__.py exports).
GENERATED_KEY_READ = "pulumi stack output apiKey --show-secrets"
