"""Option: the EBS CSI driver and the gp3 StorageClass, for Prometheus's volume (observability embedded, in the system
nodes' zone) and rocksdb's claim (gcsFaultTolerance rocksdb, ray_llm_eks/domain/cluster/gcs_ft.py), on the cluster the
stack builds. The driver outlives both (destroy); rocksdb's volume is the driver's to delete, so on destroy it, the
StorageClass and the nodes wait for that."""

import ray_llm_eks.stack_args as args
from ray_llm_eks.components.observability import EbsCsiDriver
from ray_llm_eks.program.graph import Graph


def add(graph: Graph) -> EbsCsiDriver | None:
    settings = graph.settings
    obs = settings.serving.observability
    rocksdb_claim = settings.gcs_ft.rocksdb and not graph.existing_cluster
    if not ((obs.in_cluster_stack and obs.mode == "embedded") or rocksdb_claim):
        return None
    csi = EbsCsiDriver(
        "ebs-csi",
        args.ebs_csi_driver_args(settings),
        graph.agent(),
        graph.on_system_nodes,
        reclaim_kubeconfig=graph.cluster.kubeconfig if rocksdb_claim else None,
        nodes=graph.nodes if rocksdb_claim else (),
    )
    if rocksdb_claim:
        graph.installed.append(csi)
    return csi
