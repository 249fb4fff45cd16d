"""What is measured and watched: the observability setting and the monitoring release, the SLO, the alert rules, Ray's
and vLLM's metric names."""
