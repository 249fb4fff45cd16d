"""Components of ray-llm-eks: one Pulumi ComponentResource per box of the design (see README); the
Pulumi-free logic they use is in ray_llm_eks/domain/."""
