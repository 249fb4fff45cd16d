"""What `destroy` waits for that a controller or AWS deletes outside the graph, and for how long. Pure.

- rocksdb's GCS volume: the KubeRay operator makes the claim per RayCluster and the EBS CSI driver makes its
  volume (a PersistentVolume of the graph's gp3 StorageClass, `reclaimPolicy: Delete`). Deleting the
  RayService only starts the chain (garbage collector removes the claim, the driver detaches and deletes the
  volume); the graph waits, before the CSI driver and the nodes go, until no PersistentVolume of that class
  that the driver is to delete remains (ray_llm_eks/components/observability.py EbsCsiDriver,
  ray_llm_eks/adapters/teardown.py).
- Branch ENIs of security groups for pods (the Ray head with the redis store): the VPC resource controller
  deletes a pod's branch interface a cooldown after the pod goes (60 s by default, 30 s at least, raised in
  the amazon-vpc-cni ConfigMap's `branch-eni-cooldown` with no upper bound: aws/amazon-vpc-resource-controller-k8s
  pkg/provider/branch/cooldown/cooldown.go DefaultCoolDownPeriod, trunk.go DeleteCooledDownENIs), or at once
  when the node goes (trunk.go DeleteAllBranchENIs). Until then the head's security group cannot be deleted;
  terraform-provider-aws retries DependencyViolation for the group's whole delete timeout
  (internal/service/ec2/vpc_security_group.go resourceSecurityGroupDelete, 15 min by default), which the
  graph sets explicitly (ray_llm_eks/components/gcs_store.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_llm_eks.domain.core.facts import DEV_ENVIRONMENTS


def keeps_data(environment: str) -> bool:
    """Outside dev, `destroy` must not take what holds data or an audit trail: the EKS cluster, its secrets key, the
    GCS store and Prometheus's volume are protected (Pulumi refuses to delete or replace them until `pulumi state
    unprotect`), and the control plane's log group is retained (`destroy` leaves it in CloudWatch with its
    retention). A dev stack stays one `make destroy` from gone."""
    return environment not in DEV_ENVIRONMENTS


# How long the graph waits for the CSI driver to delete the volumes of its StorageClass: the head pod's
# termination, the volume's detach and the driver's DeleteVolume take about a minute together; ten leaves
# room for the driver's retries, and a wait that runs out stops `destroy` with the volumes named (the driver
# and the nodes then stay, so `make destroy` again finishes once they are gone) instead of orphaning them.
RECLAIM_TIMEOUT_SECONDS = 600
RECLAIM_POLL_SECONDS = 10

# The head's security group (pods' branch ENIs hold it): the provider's own retry, explicit and longer than
# its 15 min default, so a raised `branch-eni-cooldown` or a slow pod termination still fits.
POD_SECURITY_GROUP_DELETE_TIMEOUT = "20m"
# The VPC resource controller's default and smallest cooldown (cooldown.go), in seconds.
BRANCH_ENI_COOLDOWN_SECONDS = 60
BRANCH_ENI_MIN_COOLDOWN_SECONDS = 30


def minutes(timeout: str) -> float:
    """A Pulumi custom timeout ("20m", "90s", "1h") in minutes."""
    units = {"s": 1 / 60, "m": 1, "h": 60}
    if not timeout or timeout[-1] not in units:
        raise ValueError(f"a custom timeout like 20m, 90s or 1h, not {timeout!r}")
    return float(timeout[:-1]) * units[timeout[-1]]


def volumes_to_reclaim(persistent_volumes: Mapping[str, Any], storage_class: str) -> list[str]:
    """The PersistentVolumes of `storage_class` the driver is still to delete (`reclaimPolicy: Delete`), as
    `name (phase)`, from a PersistentVolumeList. A `Retain` volume (Prometheus's, deleted by the graph
    itself) never goes by itself: waiting for it would only run out."""
    left = []
    for pv in persistent_volumes.get("items") or []:
        spec = pv.get("spec") or {}
        if spec.get("storageClassName") != storage_class:
            continue
        if spec.get("persistentVolumeReclaimPolicy", "Delete") != "Delete":
            continue
        phase = (pv.get("status") or {}).get("phase", "unknown")
        left.append(f"{pv.get('metadata', {}).get('name', '?')} ({phase})")
    return sorted(left)


def reclaim_timeout_message(storage_class: str, left: list[str], waited_seconds: float) -> str:
    """What `destroy` says when the driver has not deleted its volumes in time."""
    return (
        f"after {waited_seconds:.0f} s, {len(left)} PersistentVolume(s) of StorageClass {storage_class} still wait "
        f"for the EBS CSI driver to delete them: {', '.join(left)}. The driver and the nodes stay so nothing is "
        "orphaned; `kubectl get pv,pvc -A` and `kubectl describe pv` say why, then run `make destroy` again "
        "(docs/operations.md: destroy stops partway)"
    )
