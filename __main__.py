"""ray-llm-eks: wiring only. Every box is a component in ray_llm_eks/components/; see README for the picture."""

import pulumi

import ray_llm_eks.stack_args
from ray_llm_eks.adapters import environment, registry, stack
from ray_llm_eks.adapters.aws_answers import PulumiAwsAnswers
from ray_llm_eks.components.auto_mode import AutoModeNodePools
from ray_llm_eks.components.cluster import Cluster
from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscaler
from ray_llm_eks.components.device_plugins import DevicePlugins
from ray_llm_eks.components.existing_cluster import ExistingCluster
from ray_llm_eks.components.gcs_store import GcsStore
from ray_llm_eks.components.gpu_nodes import GpuNodePool
from ray_llm_eks.components.karpenter import Karpenter
from ray_llm_eks.components.kuberay import KubeRayOperator
from ray_llm_eks.components.llm_service import LlmService
from ray_llm_eks.components.load_balancer import InternalEndpoint, LoadBalancerController
from ray_llm_eks.components.network import Network
from ray_llm_eks.components.observability import EbsCsiDriver, MonitoringStack, ServiceMonitoring
from ray_llm_eks.components.pod_identity import PodIdentityAgent
from ray_llm_eks.components.weights_access import WeightsAccess
from ray_llm_eks.domain.checks import known_issues, placeholders, preflight
from ray_llm_eks.domain.cluster import gcs_ft, node_provisioning, upgrades
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.yaml_files import YamlSyntaxError
from ray_llm_eks.domain.fit import pool_use, scaling
from ray_llm_eks.domain.loading import config
from ray_llm_eks.domain.platform import pins
from ray_llm_eks.domain.security import secret_content
from ray_llm_eks.domain.stack import cost
from ray_llm_eks.domain.telemetry import observability

try:  # a bad value or an AWS refusal stops here, before any resource
    stack_config = stack.running_stack()
    settings = stack.load_settings(stack_config)  # typed and validated
    mode = settings.deploy_mode
    for line in config.secret_checks(settings, deploying=stack.deploying()):
        pulumi.log.warn(line)
    for line in placeholders.check(settings, deploying=stack.deploying()):  # values copied from documentation
        pulumi.log.warn(line)
    for line in known_issues.warnings(settings):  # upstream bugs on this stack's path, warned only
        pulumi.log.warn(line)
    # AWS offerings, quotas, version calendar: only for the cluster this stack builds.
    checks = [] if mode.existing_cluster else preflight.run(settings, PulumiAwsAnswers(), environment.today())
    # The image's digest and the add-ons' versions: kept in the stack file (`make pin`), required outside dev.
    missing = pins.unpinned(settings.serving.image, dict(settings.cluster.addon_versions), not mode.existing_cluster)
    for line in pins.require_pinned(settings.hardening.environment, missing) if stack.deploying() else []:
        pulumi.log.warn(line)
    # The serving image by digest (tag kept): looked up in its registry at preview/up, a placeholder offline.
    settings = registry.with_pinned_image(settings, deploying=stack.deploying())
except (ConfigError, YamlSyntaxError, preflight.PreflightError, registry.DigestLookupFailed) as error:
    if environment.offline_plan_set():  # `make plan` and the tests want the typed error
        raise
    raise pulumi.RunError(str(error)) from None  # the CLI prints it as one line, no stack trace
secrets = stack.stack_secrets()  # Pulumi secret Outputs, apart from Settings
sealed = stack.sealed_secrets()  # offline, the `secure:` values: their content is checked at deploy time
deferred = secret_content.deferred(sealed, settings.hardening.api_key_check)  # lines of what `make plan` cannot check
serving = settings.serving
estimate = cost.estimate(settings, settings.prices)
for warning in pool_use.idle_gpu_warnings(settings, stack.changed_stack_passes(stack_config)):
    pulumi.log.warn(warning)  # GPUs paid for and unused: said at `pulumi up` and in `make plan`
for line in checks:
    if line.startswith("warning:"):
        pulumi.log.warn(line.removeprefix("warning: "))

hardening = settings.hardening  # as the deploy mode applies it (no internal endpoint on an existing cluster)
installed = []
store = None
if mode.existing_cluster:
    # A cluster this stack did not create (docs/operations.md: existing clusters): no AWS resource at all.
    target = ExistingCluster(
        "existing-cluster",
        ray_llm_eks.stack_args.existing_cluster_args(
            settings, secrets.kubeconfig, offline_plan=not stack.deploying(), sealed="kubeconfig" in sealed
        ),
    )
    deferred += target.deferred
    provider, nodes = target.provider, []
else:
    network = Network("net", ray_llm_eks.stack_args.network_args(settings))
    cluster = Cluster("eks", ray_llm_eks.stack_args.cluster_args(settings), network)
    if settings.gcs_ft.redis:  # the head's GCS fault tolerance store (ray_llm_eks/domain/cluster/gcs_ft.py)
        store = GcsStore("gcs-store", ray_llm_eks.stack_args.gcs_store_args(settings, network))
    # With Karpenter or Auto Mode (nodeProvisioning) no GPU node group: NodePools make the GPU nodes (below).
    pools = {
        name: GpuNodePool(name, ray_llm_eks.stack_args.gpu_node_pool_args(pool), cluster, network)
        for name, pool in settings.gpu_pools.items()
        if not settings.node_provisioning.by_node_pools
    }
    provider, nodes = cluster.provider, [cluster.system_nodes, *pools.values()]

# In-cluster pieces use the stack's Kubernetes provider; the system nodes run them (create) and
# outlive them (destroy).
on_system_nodes = pulumi.ResourceOptions(providers=[provider], depends_on=nodes[:1])
auto_mode_nodes = not mode.existing_cluster and settings.node_provisioning.by_auto_mode
for line in node_provisioning.warnings(settings.node_provisioning):  # what Auto Mode does not allow
    pulumi.log.warn(line)
# Auto Mode's nodes bring the NVIDIA device plugin (EKS user guide automode.adoc), and its stacks have no EFA pool.
if mode.install_device_plugins and not auto_mode_nodes:
    installed.append(
        DevicePlugins("device-plugins", ray_llm_eks.stack_args.device_plugins_args(settings), on_system_nodes)
    )
karpenter_nodes = not mode.existing_cluster and settings.node_provisioning.by_karpenter
by_node_pools = settings.node_provisioning.by_node_pools  # Karpenter or Auto Mode: no Cluster Autoscaler
autoscaled = not mode.existing_cluster and not by_node_pools and scaling.autoscaler_needed(settings.gpu_pools)
# embedded and amp only on the cluster we build (ray_llm_eks/domain/telemetry/observability.py)
obs = serving.observability
# Controllers with an AWS role (and the EBS CSI driver, Prometheus's remote write): one Pod Identity agent.
# rocksdb's claim (GCS fault tolerance, ray_llm_eks/domain/cluster/gcs_ft.py) needs the EBS CSI driver and the gp3
# StorageClass too.
rocksdb_claim = settings.gcs_ft.rocksdb and not mode.existing_cluster
# Weights mirrored in S3: the workers' service account reads them through Pod Identity (our cluster only).
weights_access = bool(serving.weights_s3_uris) and not mode.existing_cluster
if (
    autoscaled
    or karpenter_nodes
    or hardening.internal_endpoint
    or obs.in_cluster_stack
    or rocksdb_claim
    or weights_access
):
    agent = PodIdentityAgent(
        "pod-identity-agent",
        settings.cluster.name,
        settings.cluster.kubernetes_version,
        on_system_nodes,
        ray_llm_eks.stack_args.pod_identity_agent_version(settings),
    )
if karpenter_nodes:
    # Everything on the GPU nodes depends on it, so on destroy the RayService, plugins and exporters go
    # first, then its NodePools (Karpenter drains and terminates their nodes), then Karpenter.
    karpenter = Karpenter(
        "karpenter", ray_llm_eks.stack_args.karpenter_args(settings), cluster.eks, agent, on_system_nodes
    )
    nodes.append(karpenter)
if auto_mode_nodes:
    # Like Karpenter's: everything on the GPU nodes depends on it, so on destroy its NodePools go after them.
    nodes.append(
        AutoModeNodePools("auto-mode", ray_llm_eks.stack_args.auto_mode_args(settings), cluster.eks, on_system_nodes)
    )
if weights_access:  # before any worker starts (the webhook mutates pods at creation)
    installed.append(
        WeightsAccess(
            "weights", serving.weights_s3_uris, settings.cluster.name, serving.namespace, settings.region, agent
        )
    )
if autoscaled:
    installed.append(
        ClusterAutoscaler(
            "cluster-autoscaler", ray_llm_eks.stack_args.cluster_autoscaler_args(settings), agent, on_system_nodes
        )
    )
if hardening.internal_endpoint:
    controller = LoadBalancerController(
        "lb-controller", ray_llm_eks.stack_args.load_balancer_controller_args(settings, network), agent, on_system_nodes
    )
    installed.append(controller)
if mode.install_kuberay:
    installed.append(KubeRayOperator("kuberay", ray_llm_eks.stack_args.kuberay_args(settings), on_system_nodes))
monitoring = []
# Prometheus's volume (in the system nodes' zone) and rocksdb's claim: the CSI driver outlives them (destroy).
csi = None
if (obs.in_cluster_stack and obs.mode == "embedded") or rocksdb_claim:
    csi = EbsCsiDriver(
        "ebs-csi",
        ray_llm_eks.stack_args.ebs_csi_driver_args(settings),
        agent,
        on_system_nodes,
        # rocksdb's volume is the driver's to delete: on destroy it, the StorageClass and the nodes wait for that.
        reclaim_kubeconfig=cluster.kubeconfig if rocksdb_claim else None,
        nodes=nodes if rocksdb_claim else (),
    )
    if rocksdb_claim:
        installed.append(csi)
if obs.in_cluster_stack:
    monitoring.append(
        MonitoringStack(
            "monitoring",
            ray_llm_eks.stack_args.monitoring_stack_args(settings, network.gpu_availability_zone),
            agent,
            csi,
            # node-exporter and the DCGM exporter run on every node: all of them first.
            pulumi.ResourceOptions(providers=[provider], depends_on=nodes),
        )
    )
service = LlmService(
    "llm",
    ray_llm_eks.stack_args.llm_service_args(
        settings,
        secrets.hf_token,
        secrets.api_keys,
        store,
        [cluster.cluster_security_group_id, store.head_security_group_id] if store else [],
        sealed,
        secrets.ray_auth_token,
    ),
    # The operator outlives the RayService (its finalizer), and so do the plugins and nodes it runs on.
    pulumi.ResourceOptions(providers=[provider], depends_on=[*installed, *nodes]),
)
if obs.enabled:
    # The monitors, rule and dashboards in the RayService's namespace, once the Prometheus Operator's
    # CRDs exist (our chart's, or the existing cluster's own); removed before either on destroy.
    ServiceMonitoring(
        "service-monitoring",
        ray_llm_eks.stack_args.service_monitoring_args(settings),
        pulumi.ResourceOptions(providers=[provider], depends_on=[service.namespace, *monitoring, *installed]),
    )
    if obs.grafana:
        pulumi.export("grafanaPortForwardCommand", observability.grafana_port_forward(obs))
if hardening.internal_endpoint:
    # After the RayService, before it on destroy; the controller outlives the NLB it removes.
    endpoint = InternalEndpoint(
        "internal-endpoint",
        ray_llm_eks.stack_args.internal_endpoint_args(settings),
        pulumi.ResourceOptions(providers=[provider], depends_on=[service, controller]),
    )
    pulumi.export("internalEndpointUrl", endpoint.url)

pulumi.export("region", settings.region)
if not mode.existing_cluster:
    pulumi.export("clusterName", cluster.name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("gpuAvailabilityZone", network.gpu_availability_zone)
    pulumi.export("gpuSubnetId", network.gpu_subnet_id)
    pulumi.export("systemNodeGroupName", cluster.system_nodes.node_group.node_group_name)
    pulumi.export("gpuNodeGroupNames", {name: pool.node_group_name for name, pool in pools.items()})
    pulumi.export("preflightChecks", checks)
if deferred:  # only where an offline plan could not check something (a shipped stack's plan has none)
    pulumi.export("deferredChecks", deferred)
pulumi.export("openaiBaseUrl", service.base_url)
if service.api_key is not None:  # generated: no apiKeys set (pulumi stack output apiKey --show-secrets)
    pulumi.export("apiKey", service.api_key)
pulumi.export("portForwardCommand", service.port_forward)
pulumi.export("curlExample", service.curl_example)
pulumi.export("openaiPythonExample", service.openai_example)  # after the port-forward: ... | python -
pulumi.export("dashboardPortForwardCommand", service.dashboard_port_forward)
pulumi.export("dashboardTokenCommand", service.dashboard_token)  # the token the dashboard asks for
pulumi.export("gcsFaultTolerance", gcs_ft.describe(settings.gcs_ft, settings.hardening.environment))
single = [role for role, view in serving.roles.items() if view.replicas.min < 2]
pulumi.export(
    "upgradeImpact", upgrades.summary(settings.upgrade_strategy, single, karpenter_nodes, auto_mode_nodes)
)  # make plan prints it
pulumi.export("servingFit", list(serving.fit))  # per role: KV cache, blocks, tokens, concurrency (model_fit)
pulumi.export("estimatedHourlyCostUsd", estimate.usd_per_hour)
pulumi.export("costEstimate", estimate.as_output())
pulumi.export("hourlyCostRangeUsd", cost.cost_range(settings, settings.prices))  # pools at min / desired / max
