"""What the harnesses make of what they measure, as pure functions (no I/O, no Pulumi, like ray_llm_eks/domain/): bench
statistics and goodput at an SLO, the KV-transfer proof from the engines' metrics, vLLM's startup log read
into the fit's terms, and a model spec from a Hugging Face config. The program never imports it."""
