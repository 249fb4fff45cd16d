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
# The node cache: on the node's RAID0 NVMe array (nodeadm localStorage), so a replaced pod finds
# what the last one built instead of downloading and compiling again: the weights (HF_HOME), vLLM's
# torch.compile output (VLLM_CACHE_ROOT, default ~/.cache/vllm) and Triton's kernels (TRITON_CACHE_DIR:
# vLLM 0.26's default compile path leaves it at ~/.triton/cache, inside the container).
MODEL_CACHE_HOST_PATH = f"{LOCAL_NVME_ROOT}/model-cache"
MODEL_CACHE_MOUNT = "/mnt/model-cache"
CACHE_ENV = {
    "HF_HOME": f"{MODEL_CACHE_MOUNT}/hf",
    "VLLM_CACHE_ROOT": f"{MODEL_CACHE_MOUNT}/vllm",
    "TRITON_CACHE_DIR": f"{MODEL_CACHE_MOUNT}/triton",
    # huggingface_hub 1.x dropped hf_transfer ("hf_transfer is not used anymore", constants.py); its
    # Xet downloader's high-performance mode is the replacement (vLLM 0.26 weight_utils sets it too).
    "HF_XET_HIGH_PERFORMANCE": "1",
}
# Only what the init container needs: chmod on the mounted directory.
INIT_REQUESTS = Resources(100, 64)
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080, "serve": 8000}
SERVE_PORT = HEAD_PORTS["serve"]


def _resources(requests: Resources, extra: Mapping[str, int] | None = None) -> dict:
    """Requests equal limits: GPU workers get Guaranteed QoS and are never throttled or evicted first."""
    amounts = {**requests.as_k8s(), **{k: str(v) for k, v in (extra or {}).items()}}
    return {"requests": amounts, "limits": dict(amounts)}


def _token_env() -> dict:
    return {"name": HF_TOKEN_KEY, "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}}}


def head_group(serving: ServingSettings, with_token: bool) -> dict:
    """The head builds the app, which reads a gated model's config from the hub: it needs the token too."""
    head = {
        "name": "ray-head",
        "image": serving.image,
        "ports": [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()],
        "resources": _resources(HEAD_REQUESTS),
    }
    if with_token:
        head["env"] = [_token_env()]
    return {
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "spec": {
                "nodeSelector": dict(SYSTEM_LABELS),
                "containers": [head],
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
    env = [{"name": name, "value": value} for name, value in CACHE_ENV.items()]
    if with_token:
        env.append(_token_env())
    if pool.efa:
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            # GPU memory straight to EFA only where the instance has GPUDirect RDMA (p4d/p5, not g6).
            {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1" if pool.spec.gpudirect_rdma else "0"},
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},  # Ray forks workers after libfabric is loaded
            # No huge pages: a pod asking for hugepages-2Mi must match what the node pre-allocated, and
            # with huge pages on, os.fork() fails with "Cannot allocate memory" (aws-samples
            # awsome-distributed-training efa-cheatsheet.md: FI_EFA_USE_HUGE_PAGE=0, "minor
            # performance hit", "needed to prevent fork fails"); Ray and vLLM fork worker processes.
            {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"},
        ]
    return env


def cache_permissions(image: str) -> dict:
    """An init container that opens the node cache to whatever user the serving image runs as: a
    DirectoryOrCreate hostPath is created root-owned 0755. Only `chmod` from the image is used (no
    shell); 1777 like /tmp, so files stay their owner's."""
    return {
        "name": "cache-permissions",
        "image": image,
        "command": ["chmod", "1777", MODEL_CACHE_MOUNT],
        "securityContext": {"runAsUser": 0},
        "resources": _resources(INIT_REQUESTS),
        "volumeMounts": [{"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT}],
    }


def serve_readiness() -> dict:
    """Ready when this worker's Serve proxy answers. KubeRay 1.7 would inject `bash -c "wget ...
    :8000/-/healthz"` for RayService workers (ray-operator common/pod.go), which needs bash and wget
    in the image; an httpGet probe needs nothing, and KubeRay keeps a probe the user set. Timing as
    KubeRay's (failure threshold 1: a worker whose proxy fails leaves the serve Service at once)."""
    return {
        "httpGet": {"path": "/-/healthz", "port": SERVE_PORT},
        "initialDelaySeconds": 10,
        "timeoutSeconds": 2,
        "periodSeconds": 5,
        "failureThreshold": 1,
    }


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
                "initContainers": [cache_permissions(serving.image)],
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": serving.image,
                        "resources": _resources(size, devices),
                        "securityContext": security,
                        "readinessProbe": serve_readiness(),
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
            "headGroupSpec": head_group(serving, with_token),
            "workerGroupSpecs": [worker_group(p, serving, pools, with_token) for p in pools.values()],
        },
    }
