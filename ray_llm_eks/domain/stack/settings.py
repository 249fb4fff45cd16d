"""The typed stack settings: frozen dataclasses built once by ray_llm_eks.domain.loading.config from the stack's values.
Everything downstream (components, plan, rehearsals) reads these, never raw config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from ray_llm_eks.domain.cluster.deploy_mode import DeployMode
from ray_llm_eks.domain.cluster.gcs_ft import GcsFt
from ray_llm_eks.domain.cluster.node_provisioning import NodeProvisioning
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.facts import PD_ROLES
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.prices import NO_PRICE_OVERRIDES, PriceOverrides
from ray_llm_eks.domain.platform.versions import ChartPin
from ray_llm_eks.domain.security.hardening import HardeningSettings
from ray_llm_eks.domain.serving import model_table
from ray_llm_eks.domain.serving.model_table import ModelSpec
from ray_llm_eks.domain.serving.role_view import RoleView, views_of
from ray_llm_eks.domain.serving.serve_app import ServeDocument
from ray_llm_eks.domain.telemetry.alerts import AlertThresholds
from ray_llm_eks.domain.telemetry.alerts import default as alerts_default
from ray_llm_eks.domain.telemetry.observability import ObservabilitySettings
from ray_llm_eks.domain.telemetry.slo import Slo
from ray_llm_eks.domain.telemetry.slo import default as slo_default


@dataclass(frozen=True)
class NodePoolSettings:
    """Size and hardware of one managed node group."""

    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    disk_size_gib: int


@dataclass(frozen=True)
class NetworkSettings:
    """VPC layout: one public and one private subnet per AZ; GPU nodes only in the GPU AZ's."""

    cluster_name: str  # subnets carry the kubernetes.io/cluster/<name> tag
    vpc_cidr: str
    availability_zones: tuple[str, ...]
    gpu_availability_zone: str
    nat_gateways: str  # "single" | "perAz"


@dataclass(frozen=True)
class AmiPin:
    """The GPU AMI, fixed per stack so an unrelated `up` never recycles GPU nodes."""

    release_version: str | None = None  # e.g. v20261112: resolved through the SSM public parameter
    ami_id: str | None = None


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    kubernetes_version: str
    admin_principal_arns: tuple[str, ...]  # cluster-admin access entries besides the deployer
    public_access_cidrs: tuple[str, ...]
    service_cidr: str
    log_types: tuple[str, ...]
    log_retention_days: int
    system_nodes: NodePoolSettings
    # EKS add-on -> the version `make pin` kept (ray_llm_eks/domain/platform/pins.py); an add-on left out is
    # resolved at deploy (dev only).
    addon_versions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GpuPoolSettings:
    name: str  # the pool's name: its node group, its nodes' pool label, its Ray worker group
    nodes: NodePoolSettings
    spec: aws_facts.InstanceSpec  # its instance type's hardware (our table's or the stack's instanceTypes)
    availability_zone: str
    kubernetes_version: str
    ami: AmiPin
    serves: str | None = None  # the serve config's role it runs, when it is not the pool's name
    # The gpuPools.<name> fields the stack sets: bounds left out follow the role's replicas
    # (ray_llm_eks/domain/fit/scaling.py).
    given: frozenset[str] = frozenset()

    @property
    def app_role(self) -> str:
        """The serve config's role (prefill, decode, collocated) this pool's workers run."""
        return self.serves or self.name

    @property
    def efa(self) -> bool:
        return self.needs_efa(self.app_role)

    @staticmethod
    def needs_efa(role: str) -> bool:
        """PD pools move the KV cache over EFA; the collocated baseline does not need it."""
        return role in PD_ROLES


@dataclass(frozen=True)
class ServingSettings:
    """The Kubernetes half: operator, device plugins and the RayService with its application."""

    serve_document: ServeDocument  # rendered, fitted and checked; served as the serveConfigV2 (keyed by default)
    fit: tuple[str, ...]  # per role: the memory vLLM is predicted to find (ray_llm_eks/domain/fit/model_fit.py)
    namespace: str
    service_name: str  # RayService metadata.name
    image: str
    ray_version: str
    kuberay: ChartPin
    nvidia_plugin: ChartPin
    efa_plugin: ChartPin
    privileged_workers: bool
    ready_timeout_seconds: int
    weights_s3_uris: tuple[str, ...] = ()  # s3:// model sources: the workers' service account reads them
    efa_plugin_image: str | None = None  # the EFA device plugin's image repository in this region
    cluster_autoscaler: ChartPin | None = None  # installed when a GPU pool's min and max differ
    lb_controller: ChartPin | None = None  # the AWS Load Balancer Controller (internalEndpoint)
    # ray_llm_eks/domain/telemetry/observability.py
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    # the stack's modelSpec; None: ray_llm_eks/domain/serving/model_table.py's table knows the model
    model_spec: ModelSpec | None = None
    serve_config: str = ""  # the serveConfig it was rendered from (ray_llm_eks/serve_configs/<name>.yaml)
    # What the image holds, component -> version (ray_llm_eks/domain/platform/versions.py DLC_IMAGES); your own image:
    # Ray only.
    versions: Mapping[str, str] = field(default_factory=dict)
    max_num_seqs_derived: frozenset[str] = frozenset()  # roles whose max_num_seqs the fit derived (per GPU type)

    @cached_property
    def roles(self) -> Mapping[str, RoleView]:
        """The rendered application's roles, viewed once (ray_llm_eks/domain/serving/role_view.py): model, engine
        arguments, replica bounds, GPUs per replica, the engine's context."""
        spec = self.model_spec
        views = views_of(
            self.serve_document.roles,
            lambda model_id, source: model_table.model_spec(model_id, source, spec).max_context,
        )
        return MappingProxyType(views)


@dataclass(frozen=True)
class Settings:
    stack: str
    region: str
    network: NetworkSettings
    cluster: ClusterSettings
    serving: ServingSettings
    gpu_pools: Mapping[str, GpuPoolSettings] = field(default_factory=dict)
    # The instance types it plans with: ray_llm_eks/domain/platform/aws_facts.py's and its own instanceTypes.
    instance_types: aws_facts.InstanceTable = field(default_factory=lambda: aws_facts.INSTANCE_SPECS)
    prices: PriceOverrides = NO_PRICE_OVERRIDES
    hardening: HardeningSettings = field(default_factory=HardeningSettings)  # ray_llm_eks/domain/security/hardening.py
    # ray_llm_eks/domain/telemetry/slo.py: the alerts' and the benchmark's objectives
    slo: Slo = field(default_factory=slo_default)
    alerts: AlertThresholds = field(default_factory=alerts_default)  # ray_llm_eks/domain/telemetry/alerts.py
    # Whether the stack sets its secrets; their values reach the components apart from Settings
    # (ray_llm_eks/adapters/stack.py StackSecrets), so no secret is ever inside a Settings.
    hf_token_set: bool = False
    api_keys_set: bool = False  # the endpoint's API keys (ray_llm_eks/domain/serving/api_keys.py)
    ray_auth_token_set: bool = False  # the Ray cluster's token is the stack's own, not a random one
    # the head's GCS fault tolerance (ray_llm_eks/domain/cluster/gcs_ft.py)
    gcs_ft: GcsFt = field(default_factory=GcsFt)
    upgrade_strategy: str = default("upgradeStrategy")  # the RayService's (ray_llm_eks/domain/cluster/upgrades.py)
    deploy_mode: DeployMode = field(default_factory=DeployMode)  # onto our own cluster or an existing one
    # ray_llm_eks/domain/cluster/node_provisioning.py
    node_provisioning: NodeProvisioning = field(default_factory=NodeProvisioning)
