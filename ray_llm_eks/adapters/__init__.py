"""Every read of the outside world: Pulumi config and outputs, stack files, the Kubernetes API,
botocore's facts and their cache, AWS answers, environment variables and the clock. Each adapter
hands ray_llm_eks/domain/ plain values; ray_llm_eks/domain/ never imports this package (import-linter,
pyproject.toml)."""
