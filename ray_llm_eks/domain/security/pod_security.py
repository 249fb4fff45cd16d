"""Pod Security Admission labels of the namespaces the stack creates (the API server's built-in
PodSecurity admission enforces them): each namespace at the strictest level its pods pass, and warned
and audited at the next one where that is not restricted, so what keeps it lower is on record."""

from __future__ import annotations

from ray_llm_eks.domain.core.facts import KUBERAY_NAMESPACE
from ray_llm_eks.domain.telemetry.observability import NAMESPACE as MONITORING_NAMESPACE

PREFIX = "pod-security.kubernetes.io"  # Kubernetes' PodSecurity admission labels: <prefix>/enforce, warn, audit
LEVELS = ("privileged", "baseline", "restricted")

# The Ray namespace: every GPU worker mounts the node's model cache (a hostPath volume,
# ray_llm_eks/domain/render/ray_service.py)
# and EFA workers run privileged (privilegedWorkers) or add IPC_LOCK; baseline allows neither hostPath
# volumes nor capabilities beyond its short list, so privileged even with privilegedWorkers false.
SERVING = "privileged"
# The PodSecurity check reasons (pod-security-admission's words, as the API server reports them) that keep the
# Ray namespace from baseline: the model cache's hostPath, privileged EFA workers, IPC_LOCK without privileged.
SERVING_NEEDS = frozenset({"hostPath volumes", "privileged", "non-default capabilities"})
# kube-prometheus-stack's node-exporter uses the host's network, PID namespace and paths
# (prometheus-node-exporter 4.56.1 values.yaml hostNetwork, hostPID, hostRootFsMount) and the DCGM
# exporter adds SYS_ADMIN (dcgm-exporter 4.8.2 values.yaml securityContext): both only privileged.
MONITORING = "privileged"
MONITORING_NEEDS = frozenset({"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"})
# The KubeRay operator's container drops every capability, runs as non-root with RuntimeDefault seccomp
# and no privilege escalation (kuberay-operator chart values.yaml securityContext, read at a later commit than
# the pinned chart): it should pass restricted, which is warned and audited; enforced is baseline until a
# deploy of the pinned chart shows restricted admits it (enforcing too strict a level would refuse the operator).
KUBERAY = "baseline"
KUBERAY_NEEDS: frozenset[str] | None = None  # not established: no deploy of the pinned chart was checked


def labels(enforce: str) -> dict[str, str]:
    """enforce at `enforce`; warn and audit one level stricter (the same when it is restricted)."""
    stricter = next_level(enforce) or enforce
    return {f"{PREFIX}/enforce": enforce, f"{PREFIX}/warn": stricter, f"{PREFIX}/audit": stricter}


def next_level(level: str) -> str | None:
    """The level one stricter than `level`; None for restricted."""
    i = LEVELS.index(level)
    return LEVELS[i + 1] if i + 1 < len(LEVELS) else None


def namespaces(serving_namespace: str) -> dict[str, tuple[str, frozenset[str] | None]]:
    """Each namespace the stack may create: its enforce level and the check reasons that keep it below the
    next level (None where they are not established)."""
    return {
        serving_namespace: (SERVING, SERVING_NEEDS),
        MONITORING_NAMESPACE: (MONITORING, MONITORING_NEEDS),
        KUBERAY_NAMESPACE: (KUBERAY, KUBERAY_NEEDS),
    }
