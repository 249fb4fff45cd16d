"""Components of ray-llm-eks: one ComponentResource per box of the design (see README)."""
