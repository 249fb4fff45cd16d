"""Settings rendered into what Kubernetes and Grafana read: the RayService, Karpenter's NodePools and node classes,
the dashboards."""
