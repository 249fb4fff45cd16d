"""Stack configuration: read once into frozen dataclasses and validated before any resource exists.

Every key lives in the `ray-llm-eks:` namespace and is listed in domain/data/config_keys.yaml
(domain/config_keys.py refuses any other). Scalars are typed keys; node pools are structured values
that this module checks itself, unknown fields included. Any bad value raises ConfigError naming the
key, the value and what is allowed.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from domain import (
    alerts,
    api_keys,
    aws_facts,
    config_keys,
    field_checks,
    gcs_ft,
    image_ref,
    known_issues,
    model_fit,
    model_table,
    monitoring_release,
    node_provisioning,
    observability,
    prices,
    roles,
    routing,
    scaling,
    serve_config,
    sizing,
    slo,
    subnets,
    upgrades,
    versions,
)
from domain.aws_facts import BotocoreFacts
from domain.deploy_mode import DeployMode, parse_deploy_mode
from domain.errors import UNSET, ConfigError, kind_text, mapping_of, unknown_field, yaml_text
from domain.facts import GPU_ROLES
from domain.hardening import load_hardening, switched_off
from domain.observability import ObservabilitySettings
from domain.routing import route_roles
from domain.settings import (
    AmiPin,
    ChartPin,
    ClusterSettings,
    GpuPoolSettings,
    NetworkSettings,
    NodePoolSettings,
    ServingSettings,
    Settings,
)

# ---------------------------------------------------------------------------------------------
# Reading raw values


Getter = Callable[[str], "str | None"]


_TABLE = object()  # no default given in code: the config-key table's (or None where it has none)


def _fallback(key: str, computed: Any) -> Any:
    """What an unset key reads as. A constant default is written only in domain/data/config_keys.yaml;
    code gives one only where it is computed (per stack, per region, from other keys)."""
    if computed is not _TABLE:
        if config_keys.has_default(key):
            raise AssertionError(f"{key}: its default is in {config_keys.KEYS_FILE.name}; do not repeat it in code")
        return computed
    return config_keys.default(key) if config_keys.has_default(key) else None


class _Raw:
    """Raw stack values as Pulumi hands them to a program: strings, JSON for arrays and objects. An
    unset key reads as its default (_fallback)."""

    def __init__(self, get: Getter):
        self._get = get

    def is_set(self, key: str) -> bool:
        return self._get(key) is not None

    def text(self, key: str, computed: Any = _TABLE) -> str | None:
        value = self._get(key)
        return _fallback(key, computed) if value is None else value

    def integer(self, key: str, computed: Any = _TABLE) -> int:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        try:
            return int(value)
        except ValueError:
            raise ConfigError(key, value, "a whole number") from None

    def boolean(self, key: str, computed: Any = _TABLE) -> bool:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        if value.lower() not in ("true", "false"):
            raise ConfigError(key, value, "true or false")
        return value.lower() == "true"

    def structured(self, key: str, kind: type, computed: Any = _TABLE) -> Any:
        value = self._get(key)
        if value is None:
            return _fallback(key, computed)
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if not isinstance(parsed, kind):
            raise ConfigError(key, parsed, _MAPPINGS[key] if kind is dict else "a list")
        return parsed


def _fields(key: str, raw: Any, allowed: Mapping[str, type], required: tuple[str, ...] = ()) -> dict:
    """Check one structured value: a mapping with only known fields of the right types."""
    if not isinstance(raw, dict):
        raise ConfigError(key, raw, mapping_of(allowed))
    for name, value in raw.items():
        if name not in allowed:
            raise unknown_field(key, name, value, allowed)
        kind = allowed[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key}.{name}", value, kind_text(kind))
    for name in required:
        if name not in raw:
            raise ConfigError(f"{key}.{name}", UNSET, f"required: {mapping_of(allowed)}")
    return raw


# ---------------------------------------------------------------------------------------------
# Checks shared by several keys


_POOL_FIELDS = {"instanceType": str, "minSize": int, "desiredSize": int, "maxSize": int, "diskSizeGiB": int}
# What each mapping-valued key holds, for the line that refuses a value of another kind (from the module that
# parses the key).
_MAPPINGS = {
    "systemNodes": mapping_of(_POOL_FIELDS),
    "gpuPools": mapping_of(
        [*_POOL_FIELDS, "serves"], by=f"pool names (roles {yaml_text(GPU_ROLES)}, or any name with `serves: <role>`)"
    ),
    "replicas": f"a mapping of roles {yaml_text(GPU_ROLES)} to whole numbers of replicas",
    "autoscaling": scaling.SHAPE,
    "routing": routing.SHAPE,
    "observability": observability.SHAPE,
    "modelSpec": model_table.SPEC_SHAPE,
    "prices": prices.SHAPE,
    "slo": slo.SHAPE,
    "alerts": alerts.SHAPE,
}


def _node_pool(key: str, raw: Any, default_disk: int, facts: BotocoreFacts) -> NodePoolSettings:
    raw = _fields(key, raw, _POOL_FIELDS, required=("instanceType",))
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


def _network(raw: _Raw, region: str, cluster_name: str) -> NetworkSettings:
    vpc = field_checks.check_vpc_cidr("vpcCidr", raw.text("vpcCidr"))
    azs = raw.structured("availabilityZones", list, [f"{region}a", f"{region}b"])
    zones = field_checks.check_availability_zones("availabilityZones", azs, region)
    gpu_az = field_checks.check_gpu_availability_zone(
        "gpuAvailabilityZone", raw.text("gpuAvailabilityZone", azs[0]), zones
    )
    nat = field_checks.check_nat_gateways("natGateways", raw.text("natGateways"))
    return NetworkSettings(cluster_name, vpc, zones, gpu_az, nat)


def _kubernetes_version(raw: _Raw) -> str:
    """A version EKS offers; whether its standard support has ended is a deploy-time check
    (preflight.check_kubernetes_support), since it depends on whether the cluster exists already."""
    return field_checks.check_kubernetes_version("kubernetesVersion", raw.text("kubernetesVersion"))


def _cluster_admins(raw: _Raw, region: str, facts: BotocoreFacts) -> tuple[str, ...]:
    """IAM principals that get cluster-admin access entries (teammates, CI). The identity that runs
    the first `up` is admin already (pulumi-eks bootstrapClusterCreatorAdminPermissions) and must not
    be listed again: EKS refuses a second access entry for it (checked at deploy time)."""
    arns = raw.structured("clusterAdmins", list)
    return field_checks.check_principal_arns("clusterAdmins", arns, facts.region_partition(region))


def _cluster(
    raw: _Raw, name: str, region: str, vpc_cidr: str, facts: BotocoreFacts, obs: ObservabilitySettings
) -> ClusterSettings:
    public_cidrs = field_checks.check_public_access_cidrs(
        "endpointPublicAccessCidrs", raw.structured("endpointPublicAccessCidrs", list)
    )
    service = field_checks.check_service_cidr("serviceCidr", raw.text("serviceCidr"))
    if ipaddress.IPv4Network(service).overlaps(ipaddress.IPv4Network(vpc_cidr)):
        raise ConfigError("serviceCidr", service, f"a block that does not overlap vpcCidr {vpc_cidr}")
    log_types = field_checks.check_log_types(
        "clusterLogTypes", raw.structured("clusterLogTypes", list), facts.eks_log_types
    )
    retention = field_checks.check_log_retention(
        "clusterLogRetentionDays", raw.integer("clusterLogRetentionDays"), facts.log_retention_days
    )
    system = _node_pool(
        "systemNodes",
        raw.structured("systemNodes", dict),
        default_disk=sizing.SYSTEM_DISK_GIB,  # the Ray head pulls the serving image: domain/sizing.py
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


def _ami_pin(raw: _Raw) -> AmiPin:
    release, ami_id = raw.text("gpuAmiReleaseVersion"), raw.text("gpuAmiId")
    field_checks.check_ami_pin(("gpuAmiReleaseVersion", "gpuAmiId"), release, ami_id)
    return AmiPin(release_version=release, ami_id=ami_id)


def _gpu_pools(raw: _Raw, network: NetworkSettings, version: str, facts: BotocoreFacts) -> dict[str, GpuPoolSettings]:
    pools_raw = raw.structured("gpuPools", dict)
    if not pools_raw:
        raise ConfigError("gpuPools", pools_raw, _MAPPINGS["gpuPools"])
    ami = _ami_pin(raw)
    pools = {}
    for name, pool_raw in pools_raw.items():
        serves = roles.pool_serves(name, pool_raw)
        sizes = {k: v for k, v in pool_raw.items() if k != "serves"}
        nodes = _node_pool(f"gpuPools.{name}", sizes, default_disk=sizing.GPU_DISK_GIB, facts=facts)
        pool = GpuPoolSettings(name, nodes, network.gpu_availability_zone, version, ami, serves, frozenset(pool_raw))
        field_checks.check_gpu_instance_type(
            f"gpuPools.{name}.instanceType", nodes.instance_type, facts, need_efa=pool.efa
        )
        pools[name] = pool
    return pools


def _chart(raw: _Raw, key: str, source: tuple[str, str]) -> ChartPin:
    """A chart from its (repository, name) in domain/versions.py, at the stack's version (its default
    is the table's)."""
    version = field_checks.check_chart_version(key, raw.text(key), source[1], config_keys.default(key))
    return ChartPin(source[0], source[1], version)


def _image(raw: _Raw, region: str, facts: BotocoreFacts) -> tuple[str, dict[str, str]]:
    """Image and the versions it holds (component -> version: Ray only for your own image, whose
    engine_kwargs are then checked by vLLM only). The AWS Ray LLM DLC by default, its versions from a table."""
    image, ray_version = raw.text("image"), raw.text("rayVersion")
    if image is not None or ray_version is not None:
        if image is None or ray_version is None:
            missing = "image" if image is None else "rayVersion"
            raise ConfigError(
                missing, UNSET, "set image and rayVersion together: rayVersion must equal the image's Ray"
            )
        pinned = re.fullmatch(image_ref.PINNED_REFERENCE, image)
        if not pinned or not (pinned.group(1) or pinned.group(2)) or image.endswith(":latest"):
            raise ConfigError(
                "image", image, "an image pinned to an exact tag, a sha256 digest or both (tag@sha256:..., not :latest)"
            )
        if not re.fullmatch(r"\d+\.\d+\.\d+", ray_version):
            raise ConfigError("rayVersion", ray_version, "an exact Ray version such as 2.58.0")
        return image, {"ray": ray_version}
    tag = raw.text("dlcImageTag")
    if tag not in versions.DLC_IMAGES:
        raise ConfigError(
            "dlcImageTag", tag, f"a DLC tag whose Ray version we know: {yaml_text(sorted(versions.DLC_IMAGES))}"
        )
    account = versions.DLC_ACCOUNTS.get(region)
    if account is None:
        raise ConfigError(
            "aws:region",
            region,
            f"a region with an AWS Deep Learning Containers registry {yaml_text(sorted(versions.DLC_ACCOUNTS))}, "
            "or set image and rayVersion to an image you host",
        )
    dlc = versions.DLC_IMAGES[tag]
    registry = f"{account}.dkr.ecr.{region}.{facts.partition_dns_suffix(region)}"
    return f"{registry}/{versions.DLC_REPOSITORY}:{tag}", dlc.components()


def _serve_overrides(raw: _Raw) -> serve_config.ServeOverrides:
    model_id, model_source = raw.text("modelId"), raw.text("modelSource")
    for key, value in (("modelId", model_id), ("modelSource", model_source)):
        if value is not None and not re.fullmatch(r"[\w][\w./:-]*", value):
            raise ConfigError(key, value, "a model id or source such as Qwen/Qwen3.5-9B (no spaces)")
    if model_source is not None and "://" in model_source:
        _s3_uri("modelSource", model_source)
    max_len = raw.integer("maxModelLen")
    if max_len is not None and not 16 <= max_len <= 10_000_000:
        raise ConfigError("maxModelLen", max_len, "a context length in tokens, 16 or more")
    replicas = raw.structured("replicas", dict) or {}
    for role, count in replicas.items():
        if role not in GPU_ROLES:
            raise ConfigError(f"replicas.{role}", count, _MAPPINGS["replicas"])
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"replicas.{role}", count, "a whole number of replicas, 1 or more")
    autoscaling = scaling.parse_autoscaling(raw.structured("autoscaling", dict) or {})
    for role in autoscaling:
        if role not in GPU_ROLES:
            raise ConfigError(f"autoscaling.{role}", autoscaling[role], f"a pool role from {yaml_text(GPU_ROLES)}")
    kv_buffer_device = raw.text("kvBufferDevice")
    if kv_buffer_device not in serve_config.KV_BUFFER_DEVICES:
        raise ConfigError("kvBufferDevice", kv_buffer_device, f"one of {yaml_text(serve_config.KV_BUFFER_DEVICES)}")
    return serve_config.ServeOverrides(
        model_id, model_source, max_len, replicas, autoscaling, kv_buffer_device, _selective_pd(raw.text("selectivePd"))
    )


def _selective_pd(value: str) -> int | None:
    """selectivePd: `off` (None), or the prompt length in tokens below which decode prefills itself."""
    if value == "off":
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,7}", value):
        raise ConfigError("selectivePd", value, "off, or a prompt length in tokens (a whole number, 1 or more)")
    return int(value)


# S3 bucket naming rules (3-63 of a-z 0-9 . -, starting and ending with a letter or digit).
_S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>[^\s]*))?")


def _s3_uri(key: str, uri: str) -> str:
    """Weights mirrored to S3: Ray Serve LLM 2.58 downloads a `s3://` model_source as a bucket mirror
    (vllm_models.py from_llm_config: CloudMirrorConfig); the nodes get read access to that prefix."""
    if not _S3_URI.fullmatch(uri):
        raise ConfigError(key, uri, "a Hugging Face repo id (org/name) or s3://<bucket>/<prefix> of the weights")
    return uri


def _without_max_num_seqs(document: dict) -> set[str]:
    configs = serve_config.llm_configs_by_role(document, "rendered")
    return {role for role, c in configs.items() if "max_num_seqs" not in (c.get("engine_kwargs") or {})}


def _serving(
    raw: _Raw, region: str, pools: Mapping[str, GpuPoolSettings], facts: BotocoreFacts, obs: ObservabilitySettings
) -> ServingSettings:
    image, held = _image(raw, region, facts)
    ray_version, vllm_version = held["ray"], held.get("vllm")
    name = raw.text("serveConfig")
    shapes = roles.role_shapes(pools)
    spec_raw = raw.structured("modelSpec", dict)
    own_spec = model_table.spec_from_config(spec_raw) if spec_raw is not None else None
    model_facts = lambda model_id, source: model_table.model_spec(model_id, source, own_spec)  # noqa: E731
    document = serve_config.render(name, _serve_overrides(raw), shapes, vllm_version, model_facts)
    route_roles(serve_config.llm_configs_by_role(document, name), raw.structured("routing", dict), name, model_facts)
    api_keys.check_no_own_ingress(document, f"serve_configs/{name}.yaml")
    efa_roles = {p.app_role for p in pools.values() if p.efa}
    # max_num_seqs derived where the fit renders it; every pool of a role must fit the role's engine.
    pool_types = [(p.app_role, p.nodes.instance_type) for p in pools.values()]
    seqs = model_fit.parse_max_num_seqs(raw.text("maxNumSeqs"))
    unset = set() if seqs is not None else _without_max_num_seqs(document)
    document, fit = model_fit.fit_serving(document, pool_types, efa_roles, own_spec, seqs)

    sources = {
        role: (c.get("model_loading_config") or {}).get("model_source") or ""
        for role, c in serve_config.llm_configs_by_role(document, "rendered").items()
    }
    weights_s3 = tuple(
        sorted({_s3_uri(f"serveConfig {role} model_source", u) for role, u in sources.items() if "://" in u})
    )

    service_name = field_checks.check_service_name("serviceName", raw.text("serviceName"))
    namespace = field_checks.check_namespace("namespace", raw.text("namespace"))
    timeout = field_checks.check_ready_timeout("serviceReadyTimeoutSeconds", raw.integer("serviceReadyTimeoutSeconds"))
    efa_registry = facts.eks_addon_registry(region)
    if efa_registry is None and any(p.efa for p in pools.values()):
        raise ConfigError(
            "aws:region",
            region,
            "a region with an Amazon EKS add-on image registry (domain/aws_facts.py EKS_ADDON_REGISTRY_ACCOUNTS): the "
            "EFA device plugin image is pulled from there",
        )
    return ServingSettings(
        observability=obs,
        serve_document=document,
        fit=fit,
        max_num_seqs_derived=frozenset(unset - _without_max_num_seqs(document)),
        model_spec=own_spec,
        namespace=namespace,
        service_name=service_name,
        image=image,
        ray_version=ray_version,
        kuberay=_chart(raw, "kuberayVersion", versions.KUBERAY_CHART),
        nvidia_plugin=_chart(raw, "nvidiaDevicePluginVersion", versions.NVIDIA_PLUGIN_CHART),
        efa_plugin=_chart(raw, "efaDevicePluginVersion", versions.EFA_PLUGIN_CHART),
        cluster_autoscaler=_chart(raw, "clusterAutoscalerVersion", versions.CLUSTER_AUTOSCALER_CHART),
        lb_controller=_chart(raw, "loadBalancerControllerVersion", versions.LB_CONTROLLER_CHART),
        privileged_workers=raw.boolean("privilegedWorkers"),
        ready_timeout_seconds=timeout,
        weights_s3_uris=weights_s3,
        efa_plugin_image=f"{efa_registry}/{versions.EFA_PLUGIN_IMAGE_REPOSITORY}" if efa_registry else None,
        serve_config=name,
        versions=held,
    )


def load_deploy_mode(get: Getter) -> DeployMode:
    """The deploy mode alone (domain/deploy_mode.py), its keys read as load_settings reads them."""
    return parse_deploy_mode(get, _Raw(get).boolean)


def load_settings(get: Getter, stack: str, region: str | None, facts: BotocoreFacts) -> Settings:
    """Build and check the whole Settings from raw stack values (`get(key)` -> str or None; a secret
    key's value is only a marker: Settings records whether it is set, never what it is) and
    botocore's facts. adapters/stack.py is the one caller outside tests."""
    raw = _Raw(get)
    if region is None or facts.region_partition(region) is None:
        raise ConfigError(
            "aws:region",
            UNSET if region is None else region,
            f"an AWS region botocore knows, e.g. {facts.known_regions()[:4]}",
        )
    if facts.ec2_service_principal(region) is None:
        raise ConfigError(
            "aws:region",
            region,
            "a region of a partition whose EC2 service principal we know "
            f"{yaml_text(sorted(aws_facts.EC2_SERVICE_PRINCIPAL))} "
            f"(the node role's trust policy); {region} is in {facts.region_partition(region)}",
        )

    name = field_checks.check_cluster_name("clusterName", raw.text("clusterName", f"ray-llm-{stack}"))
    mode = parse_deploy_mode(get, raw.boolean)

    network = _network(raw, region, name)
    obs = observability.load_observability(
        raw.structured("observability", dict),
        existing_cluster=mode.existing_cluster,
        stack_chart=_chart(raw, "kubePrometheusStackVersion", versions.KUBE_PROMETHEUS_STACK_CHART),
        dcgm_chart=_chart(raw, "dcgmExporterVersion", versions.DCGM_EXPORTER_CHART),
    )
    cluster = _cluster(raw, name, region, network.vpc_cidr, facts, obs)
    pools = _gpu_pools(raw, network, cluster.kubernetes_version, facts)
    serving = _serving(raw, region, pools, facts, obs)
    # Node bounds of autoscaling roles follow their replicas (domain/scaling.py), or must agree with them.
    pools = scaling.reconcile_pools(pools, serving.serve_document)
    price_overrides = prices.price_overrides(raw.structured("prices", dict))
    hardening = load_hardening(
        raw.text,
        lambda key: raw.structured(key, list),
        raw.boolean,
        public_cidrs_set=raw.is_set("endpointPublicAccessCidrs"),
        public_cidrs=cluster.public_access_cidrs,
        vpc_cidr=network.vpc_cidr,
        load_balancer_subnets=subnets.load_balancer_subnets(
            network.cluster_name, network.vpc_cidr, network.availability_zones
        ),
        pod_subnets=()
        if mode.existing_cluster
        else tuple(subnets.pod_subnet_cidrs(network.vpc_cidr, len(network.availability_zones))),
    )
    if mode.existing_cluster:  # the internal NLB needs the AWS Load Balancer Controller, only on the cluster we build
        hardening = replace(hardening, internal_endpoint=False)
    if not hardening.api_key_check and serving.serve_document["applications"][0]["import_path"] == (
        serve_config.SELECTIVE_PD_IMPORT
    ):
        # Its decode server reaches the pods with the key-checking ingress's code (domain/api_keys.py).
        raise ConfigError("selectivePd", raw.text("selectivePd"), "off while apiKeyCheck is false")
    settings = Settings(
        region=region,
        stack=stack,
        network=network,
        cluster=cluster,
        gpu_pools=pools,
        serving=serving,
        prices=price_overrides,
        hardening=hardening,
        slo=slo.parse(raw.structured("slo", dict)),
        alerts=alerts.load(raw.structured("alerts", dict), serving.serve_document, alerts.pool_types(pools)),
        hf_token_set=get("hfToken") is not None,
        api_keys_set=get("apiKeys") is not None,
        deploy_mode=mode,
        **_resilience(raw, hardening.environment, pools, mode.existing_cluster),
        node_provisioning=node_provisioning.parse(
            raw.text("nodeProvisioning"),
            raw.boolean("prefillSpot"),
            _chart(raw, "karpenterVersion", versions.KARPENTER_CHART),
            cluster.name,
        ),
    )
    node_provisioning.check_pools(settings.node_provisioning, [n for n, p in pools.items() if p.efa])
    known_issues.refuse(settings)  # upstream bugs the stack would hit (domain/data/known_issues.yaml)
    return settings


def _resilience(raw: _Raw, environment: str, pools: Mapping[str, GpuPoolSettings], existing_cluster: bool) -> dict:
    """GCS fault tolerance as the deploy mode allows it, the upgrade strategy (domain/gcs_ft.py, domain/upgrades.py)."""
    ft = gcs_ft.parse(raw.text("gcsFaultTolerance"), raw.text("gcsRedisNodeType"), raw.integer("gcsRedisReplicas"),
                      environment)  # fmt: skip
    ft = gcs_ft.for_mode(ft, existing_cluster)
    sizes = {role: (p.nodes.desired_size, p.nodes.max_size) for role, p in pools.items()}
    return {"gcs_ft": ft, "upgrade_strategy": upgrades.strategy(raw.text("upgradeStrategy"), sizes)}


def secret_checks(settings: Settings, deploying: bool) -> list[str]:
    """What the stack's secrets decide before deploying: a gated model without hfToken is refused, and
    so is an endpoint that checks keys but has none (every request would get 401 on GPUs paid for);
    while only planning, both are warnings. Returns the warnings, then a line per security switch turned off."""
    warnings = []
    refusals = []
    gated = model_table.gated_models(settings.serving.serve_document)
    if not settings.hf_token_set and gated:
        refusals.append(
            ConfigError("hfToken", UNSET, f"set it (pulumi config set --secret hfToken hf_...): {gated[0]} is gated")
        )
    if settings.hardening.api_key_check and not settings.api_keys_set:
        refusals.append(
            ConfigError(
                "apiKeys",
                UNSET,
                "set it: `make stack` generates a random key, or pulumi config set --secret apiKeys "
                '"$(openssl rand -hex 24)"; without one every request gets 401 (docs/security.md)',
            )
        )
    for error in refusals:
        if deploying:
            raise error
        # Not yet set is the normal state of a stack before `make stack`: a warning that says so, not a refusal.
        warnings.append(
            f"{error.key} is not set yet: {error.allowed}; `make plan` goes on without it, `pulumi up` will refuse"
        )
    return warnings + switched_off(settings.hardening, settings.api_keys_set)
