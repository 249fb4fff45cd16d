"""ray-llm-eks: wiring only. Every box is a component in components/; see README for the picture."""

import os

import pulumi

from components.aws_answers import PulumiAwsAnswers
from components.cluster import Cluster
from components.device_plugins import DevicePlugins
from components.gpu_nodes import GpuNodePool
from components.kuberay import KubeRayOperator
from components.llm_service import LlmService
from components.network import Network
from components.weights_access import WeightsAccess
from domain import cost, pool_use, preflight
from domain.config import OFFLINE_PLAN_ENV, load_stack_settings
from domain.errors import ConfigError
from domain.yaml_files import YamlSyntaxError

try:  # a bad value or an AWS refusal stops here, before any resource
    settings = load_stack_settings()  # typed and validated
    checks = preflight.run(settings, PulumiAwsAnswers(), preflight.today())  # AWS offerings, quotas
except (ConfigError, YamlSyntaxError, preflight.PreflightError) as error:
    if OFFLINE_PLAN_ENV in os.environ:  # `make plan` and the tests want the typed error
        raise
    raise pulumi.RunError(str(error)) from None  # the CLI prints it as one line, no stack trace
serving = settings.serving
estimate = cost.estimate(settings, settings.prices)
for warning in pool_use.idle_node_warnings(serving.serve_document, settings.gpu_pools):
    pulumi.log.warn(warning)  # GPUs paid for and unused: said at `pulumi up` and in `make plan`

network = Network("net", settings.network, settings.region)
cluster = Cluster("eks", settings.cluster, network, settings.region)
pools = {role: GpuNodePool(role, pool, cluster, network) for role, pool in settings.gpu_pools.items()}

# In-cluster pieces use the stack's own Kubernetes provider; the system nodes run them (create) and
# outlive them (destroy).
on_system_nodes = pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[cluster.system_nodes])
plugins = DevicePlugins(
    "device-plugins",
    serving.nvidia_plugin,
    serving.efa_plugin,
    serving.efa_plugin_image,
    settings.gpu_pools,
    on_system_nodes,
)
operator = KubeRayOperator("kuberay", serving.kuberay, on_system_nodes)
# Weights mirrored in S3: the nodes may read them before any Ray worker starts.
weights = (
    [
        WeightsAccess(
            "weights", serving.weights_s3_uris, cluster.node_role.role, settings.region, pulumi.ResourceOptions()
        )
    ]
    if serving.weights_s3_uris
    else []
)
service = LlmService(
    "llm",
    serving,
    settings.gpu_pools,
    settings.hf_token,
    # The operator outlives the RayService (its finalizer), and so do the plugins and nodes it runs on.
    pulumi.ResourceOptions(
        providers=[cluster.provider], depends_on=[operator, plugins, cluster.system_nodes, *pools.values(), *weights]
    ),
)

pulumi.export("region", settings.region)
pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gpuAvailabilityZone", network.gpu_availability_zone)
pulumi.export("gpuSubnetId", network.gpu_subnet_id)
pulumi.export("systemNodeGroupName", cluster.system_nodes.node_group.node_group_name)
pulumi.export("gpuNodeGroupNames", {role: pool.node_group_name for role, pool in pools.items()})
pulumi.export("openaiBaseUrl", service.base_url)
pulumi.export("portForwardCommand", service.port_forward)
pulumi.export("curlExample", service.curl_example)
pulumi.export("openaiPythonExample", service.openai_example)  # after the port-forward: ... | python -
pulumi.export("dashboardPortForwardCommand", service.dashboard_port_forward)
pulumi.export("estimatedHourlyCostUsd", estimate.usd_per_hour)
pulumi.export("costEstimate", estimate.as_output())
pulumi.export("preflightChecks", checks)
for line in checks:
    if line.startswith("warning:"):
        pulumi.log.warn(line.removeprefix("warning: "))
