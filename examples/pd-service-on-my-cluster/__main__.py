"""The PD LLM service on the EKS cluster I already have (its GPU nodes and device plugins are mine): the
KubeRay operator and the service, from the ray-llm-eks package's Args. LlmService renders the RayService from
the GPU pools my cluster has, one per role of the serving application, checked as a ray-llm-eks stack's
gpuPools are (docs/configuration.md)."""

import pulumi
import pulumi_kubernetes as k8s

from ray_llm_eks import GpuPoolInput, KubeRayOperator, KubeRayOperatorArgs, LlmService, LlmServiceArgs

cluster = k8s.Provider("my-cluster", kubeconfig=pulumi.Config().get_secret("kubeconfig"))  # none: the ambient one
on_cluster = pulumi.ResourceOptions(provider=cluster)
operator = KubeRayOperator("kuberay", KubeRayOperatorArgs(), on_cluster)
service = LlmService(
    "llm",
    LlmServiceArgs(
        region="us-east-1",
        serve_config="pd-disaggregated",
        gpu_pools=[GpuPoolInput("prefill", "g6.8xlarge"), GpuPoolInput("decode", "g6.8xlarge")],  # my node groups
        environment="dev",
        api_key_check=False,  # allowed in dev only: no key-checking ingress
    ),
    pulumi.ResourceOptions(provider=cluster, depends_on=[operator]),  # the operator outlives the RayService
)
pulumi.export("openaiBaseUrl", service.base_url)
pulumi.export("portForwardCommand", service.port_forward)
