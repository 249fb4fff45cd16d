"""The RayService manifest as plain data (dicts, no Pulumi resources): head group, one worker group
per GPU pool, the serve config, so tests can check it against the KubeRay CRD and redo the sizing."""

from __future__ import annotations

from collections.abc import Mapping

from domain.placement import GPU_TAINT, LOCAL_NVME_ROOT, SYSTEM_LABELS
from domain.serve_config import role_resource, to_yaml
from domain.settings import GpuPoolSettings, ServingSettings
from domain.sizing import HEAD_REQUESTS, Resources, gpu_node_daemonsets, worker_container

HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "HF_TOKEN"
# The model cache: on the node's RAID0 NVMe array (nodeadm localStorage), so a replaced pod finds the
# weights on local disk or in page cache instead of downloading ~19 GB again.
MODEL_CACHE_HOST_PATH = f"{LOCAL_NVME_ROOT}/hf-cache"
MODEL_CACHE_MOUNT = "/mnt/hf-cache"
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080, "serve": 8000}
SERVE_PORT = HEAD_PORTS["serve"]


def _resources(requests: Resources, extra: Mapping[str, int] | None = None) -> dict:
    """Requests equal limits: GPU workers get Guaranteed QoS and are never throttled or evicted first."""
    amounts = {**requests.as_k8s(), **{k: str(v) for k, v in (extra or {}).items()}}
    return {"requests": amounts, "limits": dict(amounts)}


def head_group(serving: ServingSettings) -> dict:
    return {
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "spec": {
                "nodeSelector": dict(SYSTEM_LABELS),
                "containers": [
                    {
                        "name": "ray-head",
                        "image": serving.image,
                        "ports": [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()],
                        "resources": _resources(HEAD_REQUESTS),
                    }
                ],
            }
        },
    }


def shm_mib(container: Resources) -> int:
    """/dev/shm: a quarter of the worker's memory (Ray object store, NCCL/NIXL shared buffers)."""
    return container.memory_mib // 4


def object_store_bytes(container: Resources) -> int:
    """Ray's object store: 20% of the worker's memory, inside the 25% /dev/shm volume."""
    return container.memory_mib * 1024 * 1024 // 5


def _worker_env(pool: GpuPoolSettings, with_token: bool) -> list[dict]:
    env = [{"name": "HF_HOME", "value": MODEL_CACHE_MOUNT}]
    if with_token:
        env.append(
            {"name": HF_TOKEN_KEY, "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}}}
        )
    if pool.efa:
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            # GPU memory straight to EFA only where the instance has GPUDirect RDMA (p4d/p5, not g6).
            {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1" if pool.spec.gpudirect_rdma else "0"},
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},  # Ray forks workers after libfabric is loaded
        ]
    return env


def worker_group(
    pool: GpuPoolSettings, serving: ServingSettings, pools: Mapping[str, GpuPoolSettings], with_token: bool
) -> dict:
    """Workers of one role: pinned to its pool by nodeSelector + toleration, advertising the role's
    Ray resource (one unit per GPU), sized to what the node has left after its DaemonSets."""
    spec = pool.spec
    size = worker_container(spec, gpu_node_daemonsets(with_efa=any(p.efa for p in pools.values())))
    devices = {"nvidia.com/gpu": spec.gpus}
    if pool.efa:
        devices["vpc.amazonaws.com/efa"] = spec.network_cards  # pulumi-eks: one EFA interface per card
    # NIXL registers the KV buffers with the EFA device (pinned memory, device files): privileged is
    # what the reference deployment ran; without it, IPC_LOCK lifts the memlock limit at least.
    security = {"privileged": True} if serving.privileged_workers else {"capabilities": {"add": ["IPC_LOCK"]}}
    return {
        "groupName": pool.role,
        "replicas": pool.nodes.desired_size,
        "minReplicas": pool.nodes.min_size,
        "maxReplicas": pool.nodes.max_size,
        # Ray's object store lives in /dev/shm: keep it inside the shm volume (Ray's default, 30% of
        # memory, would not fit the 25% volume and spill to disk).
        "rayStartParams": {"object-store-memory": str(object_store_bytes(size))},
        # KubeRay 1.7 group-level `resources` (CRD workerGroupSpecs[].resources) becomes
        # `ray start --resources`: the same as rayStartParams.resources, without JSON in a string.
        "resources": {role_resource(pool.role): str(spec.gpus)},
        "template": {
            "spec": {
                "nodeSelector": {"role": pool.role},
                "tolerations": [
                    {"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"], "effect": "NoSchedule"}
                ],
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": serving.image,
                        "resources": _resources(size, devices),
                        "securityContext": security,
                        "env": _worker_env(pool, with_token),
                        "volumeMounts": [
                            {"name": "dshm", "mountPath": "/dev/shm"},
                            {"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT},
                        ],
                    }
                ],
                "volumes": [
                    # Shared memory for NCCL/NIXL and Ray's object store; counts against the pod's memory.
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mib(size)}Mi"}},
                    {"name": "model-cache", "hostPath": {"path": MODEL_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}},
                ],
            }
        },
    }


def ray_service_spec(serving: ServingSettings, pools: Mapping[str, GpuPoolSettings], with_token: bool) -> dict:
    return {
        "serveConfigV2": to_yaml(serving.serve_document),
        # A fixed GPU fleet cannot host a second Ray cluster during an upgrade: cluster changes
        # replace the RayService (delete first, see LlmService); serve-config changes apply in place.
        "upgradeStrategy": {"type": "None"},
        "rayClusterConfig": {
            "rayVersion": serving.ray_version,
            "enableInTreeAutoscaling": False,
            "headGroupSpec": head_group(serving),
            "workerGroupSpecs": [worker_group(p, serving, pools, with_token) for p in pools.values()],
        },
    }
