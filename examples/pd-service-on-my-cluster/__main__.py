"""The PD LLM service on the EKS cluster I already have (its GPU nodes and device plugins are mine): the
KubeRay operator and the service, from the ray-llm-eks package's Args. The RayService is rendered from the
keys a ray-llm-eks stack file takes (docs/configuration.md), checked as that program checks them."""

import json

import pulumi
import pulumi_kubernetes as k8s

from ray_llm_eks import KubeRayOperator, KubeRayOperatorArgs, LlmService, LlmServiceArgs
from ray_llm_eks.adapters.stack import load_settings
from ray_llm_eks.adapters.stackfile import StackConfig
from ray_llm_eks.domain.render.ray_service import ray_service_spec

POOL = {"instanceType": "g6.8xlarge", "minSize": 1, "desiredSize": 1, "maxSize": 1}  # my node groups' type
KEYS = {  # as `pulumi config` hands a ray-llm-eks stack's keys over (structures as JSON)
    "aws:region": "us-east-1",
    "ray-llm-eks:existingCluster": "true",  # my cluster: its node groups and their AMI are mine
    "ray-llm-eks:environment": "dev",
    "ray-llm-eks:apiKeyCheck": "false",  # allowed in dev only: no key-checking ingress
    "ray-llm-eks:gpuPools": json.dumps({"prefill": POOL, "decode": POOL}),
}
settings = load_settings(StackConfig("ray-llm-eks", pulumi.get_stack(), KEYS, frozenset()))

cluster = k8s.Provider("my-cluster", kubeconfig=pulumi.Config().get_secret("kubeconfig"))  # none: the ambient one
on_cluster = pulumi.ResourceOptions(provider=cluster)
operator = KubeRayOperator("kuberay", KubeRayOperatorArgs(), on_cluster)
service = LlmService(
    "llm",
    LlmServiceArgs(
        ray_service_spec=ray_service_spec(settings),
        model_id=settings.serving.serve_document.model_id,
        environment=settings.hardening.environment,
        api_key_check=settings.hardening.api_key_check,
    ),
    pulumi.ResourceOptions(provider=cluster, depends_on=[operator]),  # the operator outlives the RayService
)
pulumi.export("openaiBaseUrl", service.base_url)
pulumi.export("portForwardCommand", service.port_forward)
