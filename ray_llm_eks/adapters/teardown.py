"""The waits `destroy` runs against the Kubernetes API (ray_llm_eks/domain/platform/teardown.py says what and why)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ray_llm_eks.adapters.kube_client import KubeClient
from ray_llm_eks.domain.platform import teardown

PERSISTENT_VOLUMES = "/api/v1/persistentvolumes"


class VolumesNotReclaimed(RuntimeError):
    """The CSI driver did not delete its volumes in time: `destroy` stops before the driver goes."""


def wait_until_reclaimed(
    client,
    storage_class: str,
    timeout_seconds: float = teardown.RECLAIM_TIMEOUT_SECONDS,
    poll_seconds: float = teardown.RECLAIM_POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return once no PersistentVolume of `storage_class` is left for the driver to delete; raise
    VolumesNotReclaimed naming them after `timeout_seconds`. `client` has `get(path)` (KubeClient)."""
    start = clock()
    while True:
        left = teardown.volumes_to_reclaim(client.get(PERSISTENT_VOLUMES) or {}, storage_class)
        if not left:
            return
        waited = clock() - start
        if waited >= timeout_seconds:
            raise VolumesNotReclaimed(teardown.reclaim_timeout_message(storage_class, left, waited))
        sleep(min(poll_seconds, max(timeout_seconds - waited, 0)))


def wait_until_reclaimed_from_kubeconfig(kubeconfig: str, storage_class: str) -> None:
    """The same, through the stack's kubeconfig (its `aws eks get-token` credential plugin included)."""
    wait_until_reclaimed(KubeClient.from_kubeconfig(kubeconfig), storage_class)
