"""The model and its serving application: the model table and families, vLLM's engine arguments and memory arithmetic,
the serve config rendered per role and its typed view, routing, the API key ingress."""
