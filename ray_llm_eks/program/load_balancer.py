"""Option: the internal endpoint (internalEndpoint): the AWS Load Balancer Controller, then the NLB Service in front of
the RayService, after it and before it on destroy; the controller outlives the NLB it removes."""

import pulumi

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.llm_service import LlmService
from ray_llm_eks.components.load_balancer import InternalEndpoint, LoadBalancerController
from ray_llm_eks.program.graph import Graph


def controller(graph: Graph) -> LoadBalancerController | None:
    settings = graph.settings
    if not settings.hardening.internal_endpoint:
        return None
    made = LoadBalancerController("lb-controller", args.load_balancer_controller_args(settings, graph.network),
                                  graph.agent(), graph.on_system_nodes)  # fmt: skip
    graph.installed.append(made)
    return made


def endpoint(graph: Graph, service: LlmService, controller: LoadBalancerController | None) -> None:
    if controller is None:
        return
    made = InternalEndpoint(
        "internal-endpoint",
        args.internal_endpoint_args(graph.settings),
        pulumi.ResourceOptions(providers=[graph.provider], depends_on=[service, controller]),
    )
    pulumi.export("internalEndpointUrl", made.url)
