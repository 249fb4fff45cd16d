"""The RayService manifest as plain data (dicts, no Pulumi resources): head group, one worker group
per GPU pool, the serve config behind the API key check. `ray_service_spec` is the one builder of
what deploys: the program, `make plan`, the existing-cluster check and the e2e take it from here,
and the rehearsal serves its `served_document`."""

from __future__ import annotations

from collections.abc import Mapping

from ray_llm_eks.domain.cluster import gcs_ft
from ray_llm_eks.domain.core.facts import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    HEAD_PORTS,
    POOL_NODE_LABEL,
    SERVE_PORT,
    WEIGHTS_SERVICE_ACCOUNT,
)
from ray_llm_eks.domain.platform.placement import GPU_TAINT, LOCAL_NVME_ROOT, SYSTEM_LABELS, ZONE_LABEL
from ray_llm_eks.domain.platform.sizing import (
    HEAD_REQUESTS,
    RAY_AUTOSCALER_REQUESTS,
    Resources,
    gpu_node_daemonsets,
    worker_container,
)
from ray_llm_eks.domain.render import karpenter
from ray_llm_eks.domain.security import ray_auth
from ray_llm_eks.domain.serving import api_keys
from ray_llm_eks.domain.serving.serve_app import ServeDocument, to_yaml
from ray_llm_eks.domain.serving.serve_config import role_resource
from ray_llm_eks.domain.stack.settings import GpuPoolSettings, ServingSettings, Settings
from ray_llm_eks.domain.telemetry import monitoring_release, observability

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
# The Cluster Autoscaler never evicts these pods to empty a node (its FAQ, "What types of pods can
# prevent CA from removing a node?"): a GPU node goes only once Ray has removed its idle worker, so
# an in-flight request is never cut off by a node scale-down.
NOT_EVICTABLE = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
# A container that keeps nothing beyond what the runtime must give: no privilege escalation, no capability,
# the runtime's default seccomp profile.
UNPRIVILEGED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# KubeRay's autoscaler removes a worker pod after its Ray node has run nothing this long (KubeRay's
# default, 60 s); Ray Serve has already waited downscale_delay_s (default 600 s) before it removed
# the replica, so this only adds to it.
WORKER_IDLE_TIMEOUT_SECONDS = 60


def _resources(requests: Resources, extra: Mapping[str, int] | None = None) -> dict:
    """Requests equal limits: GPU workers get Guaranteed QoS and are never throttled or evicted first."""
    amounts = {**requests.as_k8s(), **{k: str(v) for k, v in (extra or {}).items()}}
    return {"requests": amounts, "limits": dict(amounts)}


# The Hugging Face token reaches the Ray containers as a file, never as an environment variable: Hugging Face's
# client reads the file HF_TOKEN_PATH names (huggingface_hub 2.4 constants.py HF_TOKEN_PATH, utils/_auth.py
# get_token), and Ray Serve LLM copies an HF_TOKEN variable into its engines' runtime env, which Ray keeps in the GCS
# and shows on its dashboard (ray 2.58 llm/_internal/serve/engines/vllm/vllm_models.py ENV_VARS_TO_PROPAGATE).
HF_TOKEN_DIR = "/etc/ray-llm-eks/hf-token"
HF_TOKEN_VOLUME = "hf-token"


def _token_env() -> dict:
    return {"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/{HF_TOKEN_KEY}"}


def _token_volumes(with_token: bool) -> list[dict]:
    return [{"name": HF_TOKEN_VOLUME, "secret": {"secretName": HF_TOKEN_SECRET}}] if with_token else []


def _token_mounts(with_token: bool) -> list[dict]:
    return [{"name": HF_TOKEN_VOLUME, "mountPath": HF_TOKEN_DIR, "readOnly": True}] if with_token else []


def head_group(serving: ServingSettings, with_token: bool, keyed: bool, autoscales: bool) -> dict:
    """The head builds the app, which reads a gated model's config from the hub: it needs the token too.
    Keyed: the ingress code and the keys mounted (an ingress replica may run on the head). `autoscales`:
    KubeRay runs its autoscaler as a sidecar of this pod, the one Ray container that calls the Kubernetes API."""
    head = {
        "name": "ray-head",
        "image": serving.image,
        "ports": [
            {"name": n, "containerPort": p}
            for n, p in {**HEAD_PORTS, **observability.head_ports(serving.observability)}.items()
        ],
        "resources": _resources(HEAD_REQUESTS),
        # Not runAsNonRoot: the serving image's user cannot be inspected offline, and kubelet refuses to
        # start a runAsNonRoot container whose image runs as root. The head needs no privilege and no
        # capability (its ports are all above 1024, it writes only files it creates), so it keeps none.
        "securityContext": dict(UNPRIVILEGED),
    }
    env = [_token_env()] if with_token else []
    env += observability.head_env(serving.observability)  # where its dashboard finds Grafana's panels
    if env:
        head["env"] = env
    pod = {"nodeSelector": dict(SYSTEM_LABELS), "containers": [head]}
    if not autoscales:  # no autoscaler sidecar: nothing in the pod calls the Kubernetes API
        pod["automountServiceAccountToken"] = False
    if volumes := [*_token_volumes(with_token), *(api_keys.volumes() if keyed else [])]:
        pod["volumes"] = volumes
        head["volumeMounts"] = [*_token_mounts(with_token), *(api_keys.volume_mounts() if keyed else [])]
    return {
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"annotations": dict(NOT_EVICTABLE)},
            "spec": pod,
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
        # root owns the hostPath; chmod by its owner needs no capability.
        "securityContext": {"runAsUser": 0, **UNPRIVILEGED},
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
    pool: GpuPoolSettings,
    serving: ServingSettings,
    pools: Mapping[str, GpuPoolSettings],
    with_token: bool,
    keyed: bool,
    annotations: Mapping[str, str] = NOT_EVICTABLE,
    weights_region: str | None = None,
) -> dict:
    """Workers of one role: pinned to its pool by nodeSelector + toleration, advertising the role's
    Ray resource (one unit per GPU), sized to what the node has left after its DaemonSets;
    `annotations`: what keeps the node scaler from removing a node under a running worker.
    `weights_region`: the stack's region where the weights come from S3: the workers then run under
    WEIGHTS_SERVICE_ACCOUNT, whose Pod Identity association reads them (ray_llm_eks/components/weights_access.py),
    with the region given (boto3 would otherwise ask the instance metadata, closed to pods)."""
    spec = pool.spec
    beside = gpu_node_daemonsets(
        any(p.efa for p in pools.values()), monitoring_release.gpu_daemonsets(serving.observability)
    )
    size = worker_container(spec, beside)
    devices = {GPU_RESOURCE: spec.gpus}
    if pool.efa:
        devices[EFA_RESOURCE] = spec.network_cards  # pulumi-eks: one EFA interface per card
    # NIXL registers the KV buffers with the EFA device (pinned memory, device files): privileged is
    # what the reference deployment ran; without it, IPC_LOCK lifts the memlock limit at least.
    # A pool without EFA (the collocated baseline) registers nothing with a device: no privilege at all.
    if not pool.efa:
        security = dict(UNPRIVILEGED)
    elif serving.privileged_workers:
        security = {"privileged": True}
    else:
        # Only IPC_LOCK, for the memlock limit: the runtime's other defaults (NET_RAW, CHOWN, ...)
        # serve none of NIXL's paths, and the node cache is 1777 (cache_permissions). The default seccomp
        # profile takes nothing more from libfabric: the cross-memory-attach calls it would block need
        # SYS_PTRACE, dropped anyway, and libfabric probes for them and falls back (ofiwg/libfabric #5523, #6638).
        security = {**UNPRIVILEGED, "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}
    env = _worker_env(pool, with_token)
    if weights_region is not None:
        env.append({"name": "AWS_REGION", "value": weights_region})
    spec_account = {"serviceAccountName": WEIGHTS_SERVICE_ACCOUNT} if weights_region is not None else {}
    return {
        "groupName": pool.name,
        "replicas": pool.nodes.desired_size,
        "minReplicas": pool.nodes.min_size,
        "maxReplicas": pool.nodes.max_size,
        # Ray's object store lives in /dev/shm: keep it inside the shm volume (Ray's default, 30% of
        # memory, would not fit the 25% volume and spill to disk).
        "rayStartParams": {"object-store-memory": str(object_store_bytes(size))},
        # KubeRay 1.7 group-level `resources` (CRD workerGroupSpecs[].resources) becomes
        # `ray start --resources`: the same as rayStartParams.resources, without JSON in a string.
        "resources": {role_resource(pool.app_role): str(spec.gpus)},
        "template": {
            "metadata": {"annotations": dict(annotations)},
            "spec": {
                # Workers never call the Kubernetes API: KubeRay runs the autoscaler as a sidecar of the
                # head only (ray-operator v1.6.2 common/pod.go DefaultHeadPodTemplate), so no token here.
                "automountServiceAccountToken": False,
                # Pod Identity's token is a projected volume the webhook adds whatever automount says
                # (amazon-eks-pod-identity-webhook pkg/handler/handler.go getPodSpecPatch).
                **spec_account,
                "nodeSelector": {POOL_NODE_LABEL: pool.name},
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
                        "env": env,
                        "volumeMounts": [
                            {"name": "dshm", "mountPath": "/dev/shm"},
                            {"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT},
                            *_token_mounts(with_token),
                            *(api_keys.volume_mounts() if keyed else []),
                        ],
                    }
                ],
                "volumes": [
                    # Shared memory for NCCL/NIXL and Ray's object store; counts against the pod's memory.
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mib(size)}Mi"}},
                    {"name": "model-cache", "hostPath": {"path": MODEL_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}},
                    *_token_volumes(with_token),
                    *(api_keys.volumes() if keyed else []),
                ],
            },
        },
    }


def autoscaler_options() -> dict:
    """KubeRay's autoscaler sidecar in the head pod: it turns Ray's demand (pending replicas' GPU
    bundles) into worker pods, within each worker group's min/max."""
    return {
        "upscalingMode": "Default",
        "idleTimeoutSeconds": WORKER_IDLE_TIMEOUT_SECONDS,
        "resources": _resources(RAY_AUTOSCALER_REQUESTS),
    }


# KubeRay (v1.6.2 and v1.7.0) updates a running RayCluster from its RayService only when its cluster
# hash changes (rayservice_controller.go shouldUpdateCluster), and that hash leaves worker replicas,
# minReplicas and maxReplicas out (utils/util.go GenerateHashWithoutReplicasAndWorkersToDelete): a
# bound changed in place reaches the RayService, never the RayCluster whose bounds Ray's autoscaler
# reads (make e2e shows it). Only `replicas` may change in place, and only where KubeRay's autoscaler
# owns it (a new initial count matters only to a new cluster).
AUTOSCALER_OWNED_WORKER_FIELDS = ("replicas",)
WORKER_GROUPS_ANNOTATION = "ray-llm-eks/worker-groups"


def in_place_worker_fields(cluster: dict) -> tuple[str, ...]:
    return AUTOSCALER_OWNED_WORKER_FIELDS if cluster.get("enableInTreeAutoscaling") else ()


def replacement_paths(spec: dict) -> list[str]:
    """What replaces the RayService (delete first): every field of `rayClusterConfig`, worker bounds
    included, since KubeRay passes none of them to a running cluster; only the replica count its
    autoscaler owns stays out. Pulumi replaces when one of these paths contains a changed path (engine
    applyReplaceOnChanges, PropertyPath.Contains), so a worker group added or removed is caught by
    the annotation instead."""
    cluster = spec["rayClusterConfig"]
    paths = [f"spec.rayClusterConfig.{k}" for k in cluster if k != "workerGroupSpecs"]
    worker_keys = {k for group in cluster["workerGroupSpecs"] for k in group} - set(in_place_worker_fields(cluster))
    paths += [f"spec.rayClusterConfig.workerGroupSpecs[*].{k}" for k in sorted(worker_keys)]
    return [*paths, f'metadata.annotations["{WORKER_GROUPS_ANNOTATION}"]']


def worker_groups_annotation(spec: dict) -> dict[str, str]:
    return {WORKER_GROUPS_ANNOTATION: ",".join(g["groupName"] for g in spec["rayClusterConfig"]["workerGroupSpecs"])}


def worker_annotations(settings: Settings) -> dict[str, str]:
    """The Cluster Autoscaler's never-evict, and Karpenter's do-not-disrupt where NodePools make the nodes
    (Karpenter's, or Auto Mode's, which is Karpenter run by AWS: EKS user guide automode.adoc)."""
    if settings.node_provisioning.by_node_pools:
        return {**NOT_EVICTABLE, **karpenter.DO_NOT_DISRUPT}
    return dict(NOT_EVICTABLE)


def served_document(settings: Settings) -> ServeDocument:
    """The serve document the RayService runs (its serveConfigV2): the stack's application behind the
    key-checking ingress, unless the stack turned the check off (environment dev only)."""
    if not settings.hardening.api_key_check:
        return settings.serving.serve_document
    return api_keys.with_key_check(settings.serving.serve_document, settings.hardening.max_request_bytes)


def _start_without_password_in_arguments(head: dict, keyed: bool) -> None:
    """The head runs gcs_ft's start module in place of KubeRay's command: the shipped code mounted (where the key
    check has not mounted it already), the annotation that makes KubeRay keep the command."""
    template = head["template"]
    template["metadata"]["annotations"].update(gcs_ft.OVERWRITE_COMMAND)
    container = template["spec"]["containers"][0]
    container.update(gcs_ft.head_start(api_keys.MODULE_DIR))
    if not keyed:
        template["spec"].setdefault("volumes", []).append(api_keys.code_volume())
        container.setdefault("volumeMounts", []).append(api_keys.code_volume_mount())


def ray_service_spec(settings: Settings, redis_address: str = gcs_ft.ADDRESS_PLACEHOLDER) -> dict:
    """The RayService spec that deploys: the served document, and every Ray pod with what it needs
    (the Hugging Face token where the stack has one, the ingress code and the keys where it checks them);
    the head's GCS fault tolerance (ray_llm_eks/domain/cluster/gcs_ft.py: `redis_address` is the store's, known once AWS
    has it)."""
    serving, pools = settings.serving, settings.gpu_pools
    with_token, keyed = settings.hf_token_set, settings.hardening.api_key_check
    autoscales = any(view.replicas.autoscales for view in serving.roles.values())
    cluster = {
        "rayVersion": serving.ray_version,
        # Ray's token on the dashboard, the GCS and every Ray port but the health checks and metrics.
        "authOptions": ray_auth.auth_options(),
        # Ray Serve asks for replicas; KubeRay's autoscaler adds the worker pods they need.
        "enableInTreeAutoscaling": autoscales,
        "headGroupSpec": head_group(serving, with_token, keyed, autoscales),
        "workerGroupSpecs": [
            worker_group(
                p,
                serving,
                pools,
                with_token,
                keyed,
                worker_annotations(settings),
                settings.region if serving.weights_s3_uris else None,
            )
            for p in pools.values()
        ],
    }
    if autoscales:
        cluster["autoscalerOptions"] = autoscaler_options()
    if (ft := gcs_ft.options(settings.gcs_ft, redis_address)) is not None:
        cluster["gcsFaultToleranceOptions"] = ft
        if settings.gcs_ft.redis:  # its password in no process's arguments (ray_llm_eks/serve_ingress/ray_start.py)
            _start_without_password_in_arguments(cluster["headGroupSpec"], keyed)
        if settings.gcs_ft.rocksdb:  # its claim's EBS volume is bound to the zone the head first ran in
            node_selector = cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"]
            node_selector[ZONE_LABEL] = settings.network.gpu_availability_zone
    spec = {
        "serveConfigV2": to_yaml(served_document(settings)),
        # `None` (default): a fixed GPU fleet cannot host a second Ray cluster during an upgrade, so
        # cluster changes replace the RayService (delete first, see LlmService); serve-config changes
        # apply in place. `NewCluster` where the pools have room for two (ray_llm_eks/domain/cluster/upgrades.py).
        "upgradeStrategy": {"type": settings.upgrade_strategy},
        "rayClusterConfig": cluster,
    }
    api_keys.with_code_digest(spec, api_keys.SHIPPED_MODULES)
    return spec
