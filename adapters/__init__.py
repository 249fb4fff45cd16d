"""Every read of the outside world: Pulumi config and outputs, stack files, the Kubernetes API,
botocore's facts and their cache, AWS answers, environment variables and the clock. Each adapter
hands domain/ plain values; domain/ never imports this package (import-linter, pyproject.toml)."""
