"""How the cluster is provisioned and survives: the deploy mode (new or existing cluster), node provisioning, GCS
fault tolerance, what an upgrade does."""
