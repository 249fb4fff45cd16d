"""Option: weights mirrored in S3 (modelSource s3://): the workers' service account reads them through Pod Identity
(on the cluster the stack builds), before any worker starts (the webhook mutates pods at creation)."""

from ray_llm_eks.components.weights_access import WeightsAccess
from ray_llm_eks.program.graph import Graph


def add(graph: Graph) -> None:
    settings = graph.settings
    serving = settings.serving
    if serving.weights_s3_uris and not graph.existing_cluster:
        made = WeightsAccess(
            "weights", serving.weights_s3_uris, settings.cluster.name, serving.namespace, settings.region, graph.agent()
        )
        graph.installed.append(made)
