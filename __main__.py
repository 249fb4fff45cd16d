"""ray-llm-eks: wiring only, the five boxes in order and one line per option (ray_llm_eks/program/: a module each).
Every box is a component in ray_llm_eks/components/; see README for the picture."""

from ray_llm_eks.program import (
    auto_mode,
    autoscaler,
    boxes,
    device_plugins,
    ebs_csi,
    karpenter,
    load_balancer,
    observability,
    outputs,
    weights,
)
from ray_llm_eks.program.start import start

checked = start()  # the stack read, checked and pinned, or one line: no resource before this
graph = boxes.cluster(checked)  # network, cluster, GPU node pools (GCS store); or a cluster of your own
auto_mode.warn(graph)
device_plugins.add(graph)
karpenter.add(graph)  # nodeProvisioning karpenter: NodePools instead of GPU node groups
auto_mode.add(graph)  # nodeProvisioning autoMode
weights.add(graph)  # weights mirrored in S3
autoscaler.add(graph)  # GPU node groups that scale
controller = load_balancer.controller(graph)  # internalEndpoint
boxes.kuberay(graph)
csi = ebs_csi.add(graph)  # Prometheus's volume, rocksdb's claim
observability.monitoring_stack(graph, csi)
service = boxes.llm_service(graph, checked)
observability.service_monitoring(graph, service)
load_balancer.endpoint(graph, service, controller)
outputs.export(graph, checked, service)
