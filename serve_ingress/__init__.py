"""Code that runs inside the Ray pods (shipped there as a ConfigMap): the API key ingress."""
