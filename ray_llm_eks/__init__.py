"""ray-llm-eks: Pulumi components for prefill/decode-disaggregated LLM serving (Ray Serve LLM, vLLM, KubeRay)
on EKS. Every part lives under this one name, so installing the package adds nothing else to site-packages:
`ray_llm_eks.components` (the ComponentResources and their Args), `ray_llm_eks.domain` (pure: the stack's keys,
the serving application, the fit, the rendered manifests), `ray_llm_eks.adapters` (what reads the outside world
for the domain), `ray_llm_eks.stack_args` (stack config into the components' Args), `ray_llm_eks.provider` (the
component package other languages consume) and the data they ship with (serve_configs/, serve_ingress/,
observability/dashboards/). Importing this package imports nothing: the standard-library-only tools (the policy
pack, the cache root's rule) import single modules of it. The components the README draws or names, and their Args,
are its public names (`from ray_llm_eks import LlmService`): each imports its module on first use."""

# Public name -> the module of ray_llm_eks.components that defines it.
_PUBLIC = {
    "Network": "network",
    "NetworkArgs": "network",
    "Cluster": "cluster",
    "ClusterArgs": "cluster",
    "GpuNodePool": "gpu_nodes",
    "GpuNodePoolArgs": "gpu_nodes",
    "DevicePlugins": "device_plugins",
    "DevicePluginsArgs": "device_plugins",
    "KubeRayOperator": "kuberay",
    "KubeRayOperatorArgs": "kuberay",
    "ClusterAutoscaler": "cluster_autoscaler",
    "ClusterAutoscalerArgs": "cluster_autoscaler",
    "GcsStore": "gcs_store",
    "GcsStoreArgs": "gcs_store",
    "MonitoringStack": "observability",
    "MonitoringStackArgs": "observability",
    "LlmService": "llm_service",
    "LlmServiceArgs": "llm_service",
    "GpuPoolInput": "llm_service",
    "ServiceMonitoring": "observability",
    "ServiceMonitoringArgs": "observability",
    "InternalEndpoint": "load_balancer",
    "InternalEndpointArgs": "load_balancer",
    "LoadBalancerController": "load_balancer",
    "LoadBalancerControllerArgs": "load_balancer",
    "EbsCsiDriver": "observability",
    "EbsCsiDriverArgs": "observability",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module  # here: importing the package itself imports nothing

    return getattr(import_module(f"{__name__}.components.{_PUBLIC[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
