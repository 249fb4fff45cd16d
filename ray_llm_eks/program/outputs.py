"""The stack outputs: where the endpoint is and how to call it, what the cluster is, what the stack costs and what an
upgrade does to it (`make plan` prints them)."""

import pulumi

from ray_llm_eks.components.llm_service import LlmService
from ray_llm_eks.domain.cluster import gcs_ft, upgrades
from ray_llm_eks.domain.stack import cost
from ray_llm_eks.program.graph import Graph
from ray_llm_eks.program.start import Start


def export(graph: Graph, start: Start, service: LlmService) -> None:
    settings, serving = graph.settings, graph.settings.serving
    pulumi.export("region", settings.region)
    if not graph.existing_cluster:
        network, cluster = graph.network, graph.cluster
        pulumi.export("clusterName", cluster.name)
        pulumi.export("kubeconfig", cluster.kubeconfig)
        pulumi.export("gpuAvailabilityZone", network.gpu_availability_zone)
        pulumi.export("gpuSubnetId", network.gpu_subnet_id)
        pulumi.export("systemNodeGroupName", cluster.system_nodes.node_group.node_group_name)
        pulumi.export("gpuNodeGroupNames", {name: pool.node_group_name for name, pool in graph.pools.items()})
        pulumi.export("preflightChecks", start.checks)
    if graph.deferred:  # only where an offline plan could not check something (a shipped stack's plan has none)
        pulumi.export("deferredChecks", graph.deferred)
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
    impact = upgrades.summary(settings.upgrade_strategy, single, graph.karpenter_nodes, graph.auto_mode_nodes)
    pulumi.export("upgradeImpact", impact)  # make plan prints it
    pulumi.export("servingFit", list(serving.fit))  # per role: KV cache, blocks, tokens, concurrency (model_fit)
    pulumi.export("estimatedHourlyCostUsd", start.estimate.usd_per_hour)
    pulumi.export("costEstimate", start.estimate.as_output())
    pulumi.export("hourlyCostRangeUsd", cost.cost_range(settings, settings.prices))  # pools at min / desired / max
