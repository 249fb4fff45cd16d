"""The domain of ray-llm-eks, free of Pulumi: stack settings and their checks, AWS facts, sizing,
model fit, cost, the serve-config renderer and the RayService manifest. Every entry point (the
Pulumi program, `make plan`, the rehearsals) imports it; `ray_llm_eks/components/` only turns it into resources."""
