"""ray-llm-eks: Pulumi components for prefill/decode-disaggregated LLM serving (Ray Serve LLM, vLLM, KubeRay)
on EKS. Every part lives under this one name, so installing the package adds nothing else to site-packages:
`ray_llm_eks.components` (the ComponentResources and their Args), `ray_llm_eks.domain` (pure: the stack's keys,
the serving application, the fit, the rendered manifests), `ray_llm_eks.adapters` (what reads the outside world
for the domain), `ray_llm_eks.stack_args` (stack config into the components' Args), `ray_llm_eks.provider` (the
component package other languages consume) and the data they ship with (serve_configs/, serve_ingress/,
observability/dashboards/). Importing this package imports nothing: the standard-library-only tools (the policy
pack, the cache root's rule) import single modules of it."""
