"""Code that runs inside the Ray pods (shipped there as a ConfigMap): the API key ingress and the
serving application's worker setup hook."""
