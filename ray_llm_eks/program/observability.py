"""Option: observability (ray_llm_eks/domain/telemetry/observability.py). The monitoring stack in the cluster (embedded
or amp, on the cluster the stack builds), whose node-exporter and DCGM exporter run on every node, so all of them
first; then the monitors, rule and dashboards in the RayService's namespace once the Prometheus Operator's CRDs exist
(our chart's, or the existing cluster's own), removed before either on destroy."""

import pulumi

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.llm_service import LlmService
from ray_llm_eks.components.observability import EbsCsiDriver, MonitoringStack, ServiceMonitoring
from ray_llm_eks.domain.telemetry import observability
from ray_llm_eks.program.graph import Graph


def monitoring_stack(graph: Graph, csi: EbsCsiDriver | None) -> None:
    if graph.settings.serving.observability.in_cluster_stack:
        graph.monitoring.append(
            MonitoringStack(
                "monitoring",
                args.monitoring_stack_args(graph.settings, graph.network.gpu_availability_zone),
                pulumi.ResourceOptions(providers=[graph.provider], depends_on=graph.nodes),
                agent=graph.agent(),
                storage=csi,
            )
        )


def service_monitoring(graph: Graph, service: LlmService) -> None:
    obs = graph.settings.serving.observability
    if not obs.enabled:
        return
    ServiceMonitoring(
        "service-monitoring",
        args.service_monitoring_args(graph.settings),
        pulumi.ResourceOptions(
            providers=[graph.provider], depends_on=[service.namespace, *graph.monitoring, *graph.installed]
        ),
    )
    if obs.grafana:
        pulumi.export("grafanaPortForwardCommand", observability.grafana_port_forward(obs))
