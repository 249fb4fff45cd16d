"""GCS fault tolerance of the Ray head: what a lost head costs, and the RayCluster options that make it cheap.

Without it, the head pod holds the GCS in memory (Ray 2.58's default store, `ray/_private/node.py`
`_resolve_ray_config("gcs_storage", "memory")`): a lost head takes the cluster's state with it, every worker's
raylet exits once it cannot reach a GCS (60 s, Ray's `gcs_rpc_server_reconnect_timeout_s`), and every engine
loads its model again. With it, the GCS writes its tables to a store that outlives the pod; a new head reads
them back, the workers reconnect (KubeRay 1.7 gives them 600 s) and the engines keep running.

KubeRay 1.7 `spec.rayClusterConfig.gcsFaultToleranceOptions` (ray-operator apis/ray/v1/raycluster_types.go):
- `redis` (KubeRay's default backend, utils/util.go GetGcsFaultToleranceBackend): an external Redis; the
  operator puts `redisAddress` into the head's RAY_REDIS_ADDRESS and `redisPassword` (a secretKeyRef here)
  into REDIS_PASSWORD, and Ray 2.58 turns on TLS for a `rediss://` address (`_private/services.py`
  get_address). Here: ElastiCache for Valkey in the stack's private subnets (ray_llm_eks/components/gcs_store.py).
- `rocksdb`, alpha: Ray's embedded store on a PersistentVolumeClaim the operator creates per RayCluster
  (`<cluster>-gcs-pvc`, 1Gi ReadWriteOnce at /data/gcs, common/gcs_ft.go BuildGCSStoragePVC), behind the
  operator feature gate GCSFaultToleranceEmbeddedStorage (off by default, features.go). The claim belongs to
  the RayCluster: a change that makes a new RayCluster starts from an empty store. An EBS volume lives in one
  zone, so the head must stay in that zone.

The backend is immutable on a RayCluster (CRD validation `self == oldSelf`). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.facts import DEV_ENVIRONMENTS
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.platform.field_checks import check_redis_node_type, check_redis_replicas
from ray_llm_eks.domain.telemetry.observability import STORAGE_CLASS

BACKENDS = ("off", "redis", "rocksdb")
# KubeRay 1.7's operator-managed PVC size and mount (ray-operator utils/constant.go GCSStorageDefaultSize).
ROCKSDB_SIZE = "1Gi"
REDIS_PORT = 6379  # ElastiCache's default port
# The Kubernetes Secret that carries the Redis AUTH token to the head (gcsFaultToleranceOptions.redisPassword).
REDIS_SECRET = "gcs-redis-auth"
REDIS_SECRET_KEY = "password"
# The head pod's label KubeRay sets (ray-operator common/pod.go), selecting it for its security group.
HEAD_SELECTOR = {"ray.io/node-type": "head"}
# The operator feature gate rocksdb needs (ray-operator pkg/features/features.go, alpha in 1.7).
ROCKSDB_FEATURE_GATE = "GCSFaultToleranceEmbeddedStorage"
# The head's start with `redis`: ray_llm_eks/serve_ingress/ray_start.py (shipped with the ingress's code), run instead
# of KubeRay's command, which the annotation makes KubeRay leave alone (KubeRay 1.7 utils/constant.go
# RayOverwriteContainerCmdAnnotationKey, read on the pod template: common/pod.go BuildPod). The ulimit is
# KubeRay's own (common/pod.go BuildPod ulimitCmd).
OVERWRITE_COMMAND = {"ray.io/overwrite-container-cmd": "true"}
START_MODULE = "ray_start.py"


def head_start(module_dir: str) -> dict:
    """The head container's command with `redis`: KubeRay's generated `ray start`, run by START_MODULE so that the
    store's password is in no process's arguments (the module says how)."""
    script = f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; exec python {module_dir}/{START_MODULE}"
    return {"command": ["/bin/bash", "-c", "--"], "args": [script]}


# Stands for the Redis endpoint where it is not known yet: ElastiCache names it at create time.
ADDRESS_PLACEHOLDER = "rediss://<ElastiCache primary endpoint, known at deploy time>:6379"


@dataclass(frozen=True)
class GcsFt:
    backend: str = "off"  # off | redis | rocksdb
    redis_node_type: str = default("gcsRedisNodeType")
    # Read replicas beside the primary: at least one gives Multi-AZ automatic failover.
    redis_replicas: int = default("gcsRedisReplicas")
    # rocksdb's claim: the graph's gp3 StorageClass (ray_llm_eks/components/observability.py EbsCsiDriver); None: the
    # cluster's default (an existing cluster's).
    storage_class: str | None = STORAGE_CLASS
    set_by_stack: bool = False  # the stack chose the backend (else its environment's default)
    existing_cluster: bool = False  # turned off because the stack builds no AWS resource

    @property
    def on(self) -> bool:
        return self.backend != "off"

    @property
    def redis(self) -> bool:
        return self.backend == "redis"

    @property
    def rocksdb(self) -> bool:
        return self.backend == "rocksdb"


def default_backend(environment: str) -> str:
    """dev: off. A dev stack has one replica per role and nobody paged: a lost head costs a model reload
    (minutes, docs/measurements.md), cheaper than a Redis kept running. Elsewhere: redis."""
    return "off" if environment in DEV_ENVIRONMENTS else "redis"


def load(raw: RawConfig, environment: str, existing_cluster: bool) -> GcsFt:
    """The stack's `gcsFaultTolerance`, `gcsRedisNodeType` and `gcsRedisReplicas`, as the deploy mode allows them."""
    chosen = parse(
        raw.text("gcsFaultTolerance"), raw.text("gcsRedisNodeType"), raw.integer("gcsRedisReplicas"), environment
    )
    return for_mode(chosen, existing_cluster)


def parse(backend: str | None, node_type: str, replicas: int, environment: str) -> GcsFt:
    """The stack's keys gcsFaultTolerance (None: unset), gcsRedisNodeType and gcsRedisReplicas (their
    defaults already applied)."""
    chosen = default_backend(environment) if backend is None else backend
    if chosen not in BACKENDS:
        raise ConfigError("gcsFaultTolerance", chosen, f"one of {', '.join(BACKENDS)}")
    check_redis_node_type("gcsRedisNodeType", node_type)
    check_redis_replicas("gcsRedisReplicas", replicas)
    return GcsFt(chosen, node_type, replicas, set_by_stack=backend is not None)


def options(ft: GcsFt, redis_address: str = ADDRESS_PLACEHOLDER) -> dict | None:
    """spec.rayClusterConfig.gcsFaultToleranceOptions (None: off). The Redis password only by reference."""
    if ft.redis:
        return {
            "backend": "redis",
            "redisAddress": redis_address,
            "redisPassword": {"valueFrom": {"secretKeyRef": {"name": REDIS_SECRET, "key": REDIS_SECRET_KEY}}},
        }
    if ft.rocksdb:
        storage = {"size": ROCKSDB_SIZE} | ({"storageClassName": ft.storage_class} if ft.storage_class else {})
        return {"backend": "rocksdb", "storage": storage}
    return None


def with_redis_address(spec: dict, address: str) -> dict:
    """A RayService spec rendered with ADDRESS_PLACEHOLDER, with the store's `address` in its place."""
    cluster = spec["rayClusterConfig"]
    options = {**cluster["gcsFaultToleranceOptions"], "redisAddress": address}
    return {**spec, "rayClusterConfig": {**cluster, "gcsFaultToleranceOptions": options}}


def redis_address(endpoint: str) -> str:
    """ElastiCache's primary endpoint -> Ray's address: `rediss://` turns on TLS (Ray 2.58 services.py)."""
    return f"rediss://{endpoint}:{REDIS_PORT}"


def describe(ft: GcsFt, environment: str) -> str:
    """One line for `make plan`: the backend and why."""
    if ft.existing_cluster:
        return "GCS fault tolerance: off (existing-cluster mode builds no ElastiCache store; rocksdb is possible)"
    if not ft.on:
        why = (
            "environment dev: a lost head restarts every worker and reloads the model (minutes); "
            "set gcsFaultTolerance: redis to keep the engines running"
            if environment in DEV_ENVIRONMENTS
            else "off by the stack's choice: a lost head restarts every worker and reloads the model"
        )
        return f"GCS fault tolerance: off ({why})"
    if ft.redis:
        failover = "Multi-AZ automatic failover" if ft.redis_replicas else "no replica: no failover"
        return (
            f"GCS fault tolerance: redis on ElastiCache for Valkey ({1 + ft.redis_replicas} x {ft.redis_node_type}, "
            f"{failover}; TLS and AUTH on; reachable only from the Ray head's security group)"
        )
    return (
        f"GCS fault tolerance: rocksdb (ALPHA: KubeRay feature gate {ROCKSDB_FEATURE_GATE}; a {ROCKSDB_SIZE} "
        f"{ft.storage_class or 'default StorageClass'} claim per RayCluster, emptied by any change that makes a "
        "new RayCluster; the head stays in the GPU zone)"
    )


# The kuberay-operator chart's featureGates at v1.7.0 (helm-chart/kuberay-operator/values.yaml): a list
# in values replaces the chart's whole list, so turning one gate on means restating the others.
CHART_FEATURE_GATES = (
    ("RayClusterStatusConditions", True),
    ("RayJobDeletionPolicy", True),
    ("RayMultiHostIndexing", True),
    ("RayServiceIncrementalUpgrade", True),
    ("RayCronJob", False),
    ("RayClusterMTLS", False),
    ("RayClusterNetworkPolicy", False),
    ("RayClusterHistoryServer", False),
)


def operator_feature_gates(ft: GcsFt) -> list[dict] | None:
    """The chart's `featureGates` value: None (the chart's own) unless rocksdb needs its gate on."""
    if not ft.rocksdb:
        return None
    gates = [{"name": name, "enabled": on} for name, on in CHART_FEATURE_GATES]
    return [*gates, {"name": ROCKSDB_FEATURE_GATE, "enabled": True}]


def for_mode(ft: GcsFt, existing_cluster: bool) -> GcsFt:
    """On a cluster the stack did not build no AWS resource is made, so no ElastiCache store: the default
    redis turns off (`describe` says so), a redis the stack asked for is refused; rocksdb stays (it needs
    only the cluster's storage)."""
    if existing_cluster and ft.rocksdb:  # the graph declares no StorageClass there: the cluster's default
        return replace(ft, storage_class=None)
    if not (existing_cluster and ft.redis):
        return ft
    if ft.set_by_stack:
        raise ConfigError("gcsFaultTolerance", "redis", "off or rocksdb in existing-cluster mode (no AWS store)")
    return replace(ft, backend="off", existing_cluster=True)
