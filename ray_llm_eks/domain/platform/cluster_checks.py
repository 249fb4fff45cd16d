"""Existing-cluster mode: check, at deploy time, what the stack relies on in a cluster it did not
create, and name each mismatch (pool labels and taints, GPU/EFA resources advertised, room for
each pod, the KubeRay CRD). Pulumi-free: it reads the API through the client it is given
(ray_llm_eks.adapters.kube_client, or any
object with the same `get`/`get_or_none`), so tests hand it canned API answers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from ray_llm_eks.domain.core.facts import EFA_RESOURCE, GPU_RESOURCE
from ray_llm_eks.domain.platform.placement import GPU_NODE_SELECTOR, GPU_TAINT, SYSTEM_LABELS

RAYSERVICE_CRD = "rayservices.ray.io"
# Kubernetes spells the taint effect NoSchedule; the EKS node-group API spells it NO_SCHEDULE.
_K8S_EFFECT = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


class ApiReader(Protocol):
    def get(self, path: str) -> Any: ...
    def get_or_none(self, path: str) -> Any: ...


class ClusterMismatch(RuntimeError):
    """The target cluster lacks what the stack relies on; one line per mismatch."""

    def __init__(self, mismatches: list[str]):
        self.mismatches = mismatches
        lines = "\n".join(f"  - {m}" for m in mismatches)
        super().__init__(f"the existing cluster does not offer what this stack relies on:\n{lines}")


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (cpu in cores, memory in bytes)."""
    text = str(value)
    suffixes = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
        "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    }  # fmt: skip
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def _has_taint(node: dict, taint: Mapping[str, str]) -> bool:
    effect = _K8S_EFFECT.get(taint["effect"], taint["effect"])
    return any(
        t.get("key") == taint["key"] and t.get("value") == taint["value"] and t.get("effect") == effect
        for t in node.get("spec", {}).get("taints") or []
    )


def _selected(nodes: list[dict], selector: Mapping[str, str]) -> list[dict]:
    return [n for n in nodes if all(n["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]


def _fmt(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in selector.items())


def _room(node: dict, requests: Mapping[str, str]) -> list[str]:
    """Resources the node's allocatable lacks for one pod's requests."""
    allocatable = node.get("status", {}).get("allocatable", {})
    short = []
    for resource, amount in requests.items():
        have = allocatable.get(resource)
        if have is None or parse_quantity(have) < parse_quantity(amount):
            short.append(f"{resource} {amount} (allocatable {have or 'none'})")
    return short


def check_nodes(nodes: list[dict], head: dict, workers: Mapping[str, dict], pools: Iterable[str]) -> list[str]:
    """Nodes each pod group needs: `head`/`workers[pool name]` are the rendered group specs, `pools` the GPU
    pools' names (everything else a pool needs of its nodes is in its group's spec)."""
    mismatches = []
    head_requests = head["template"]["spec"]["containers"][0]["resources"]["requests"]
    system = _selected(nodes, SYSTEM_LABELS)
    if not system:
        mismatches.append(f"no node is labelled {_fmt(SYSTEM_LABELS)} (the Ray head's nodeSelector)")
    elif all(_room(n, head_requests) for n in system):
        mismatches.append(
            f"no {_fmt(SYSTEM_LABELS)} node has room for the Ray head: "
            + "; ".join(f"{n['metadata']['name']} lacks {', '.join(_room(n, head_requests))}" for n in system)
        )
    for name in pools:
        group = workers[name]
        selector = group["template"]["spec"]["nodeSelector"]
        requests = group["template"]["spec"]["containers"][0]["resources"]["requests"]
        found = _selected(nodes, selector)
        if len(found) < group["replicas"]:
            mismatches.append(
                f"pool {name}: {len(found)} node(s) labelled {_fmt(selector)}, "
                f"the stack runs {group['replicas']} worker(s)"
            )
        taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{_K8S_EFFECT[GPU_TAINT['effect']]}"
        for node in found:
            node_name = node["metadata"]["name"]
            labels = node["metadata"].get("labels", {})
            for k, v in GPU_NODE_SELECTOR.items():
                if labels.get(k) != v:
                    mismatches.append(
                        f"pool {name}: node {node_name} lacks label {k}={v} (the NVIDIA device plugin selects it)"
                    )
            if not _has_taint(node, GPU_TAINT):
                mismatches.append(f"pool {name}: node {node_name} lacks taint {taint}")
            short = _room(node, requests)
            if short:
                what = [s for s in short if s.startswith((GPU_RESOURCE, EFA_RESOURCE))]
                if what:
                    mismatches.append(f"pool {name}: node {node_name} does not advertise {'; '.join(what)}")
                rest = [s for s in short if s not in what]
                if rest:
                    mismatches.append(
                        f"pool {name}: node {node_name} has no room for a worker: needs {'; '.join(rest)}"
                    )
    return mismatches


def _unknown_fields(value: Any, schema: dict, path: str) -> Iterator[str]:
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                yield from _unknown_fields(sub, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _unknown_fields(sub, extra, f"{path}.{key}")
            elif props is not None or extra is False:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _unknown_fields(item, schema["items"], f"{path}[{i}]")


def check_crd(crd: dict | None, spec: dict, api_version: str = "v1") -> list[str]:
    """The RayService CRD is installed, serves `api_version`, and knows every field we set (the API
    server would silently prune one it does not know). CRDs carry no version label, so the fields
    are what is checked."""
    if crd is None:
        return [f"CRD {RAYSERVICE_CRD} is not installed (install KubeRay, or set installKubeRay: true)"]
    versions = {v["name"]: v for v in crd.get("spec", {}).get("versions", []) if v.get("served")}
    if api_version not in versions:
        return [f"CRD {RAYSERVICE_CRD} does not serve ray.io/{api_version} (serves {sorted(versions)})"]
    schema = versions[api_version].get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
    unknown = list(_unknown_fields(spec, schema, "spec"))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        return [
            f"CRD {RAYSERVICE_CRD} does not know field(s) {shown}: its KubeRay is older than the one this stack targets"
        ]
    return []


def check_operator_namespace(api: ApiReader, namespace: str) -> list[str]:
    """The namespace the NetworkPolicies open the Ray dashboard to exists (a typo there would lock the
    cluster's own KubeRay operator out of the head: the RayService would never turn Ready)."""
    if api.get_or_none(f"/api/v1/namespaces/{namespace}") is None:
        return [f"KubeRay operator namespace {namespace} does not exist (kuberayNamespace)"]
    return []


# What observability `external` creates on an existing cluster (ray_llm_eks/domain/telemetry/observability.py): the
# cluster's own Prometheus Operator must serve these kinds, or `up` would fail halfway at the first monitor.
MONITORING_CRDS = ("podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


def check_monitoring_crds(api: ApiReader) -> list[str]:
    missing = [
        name
        for name in MONITORING_CRDS
        if api.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") is None
    ]
    if not missing:
        return []
    return [
        f"observability.mode external needs the Prometheus Operator's CRDs, and the cluster lacks {missing}: install "
        "the Prometheus Operator (e.g. kube-prometheus-stack) or set observability.mode none"
    ]


def check_cluster(
    api: ApiReader, spec: dict, pools: Iterable[str], *, devices: bool = True, crd: bool = True
) -> list[str]:
    """Every mismatch between the cluster behind `api` and the RayService `spec` we are about to apply.
    `devices`: the GPU/EFA device plugins are the cluster's (else this stack installs them, and the
    nodes advertise nothing before they run); `crd`: KubeRay is the cluster's (else this stack installs it)."""
    nodes = api.get("/api/v1/nodes").get("items", [])
    cluster = spec["rayClusterConfig"]
    workers = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    mismatches = check_nodes(nodes, cluster["headGroupSpec"], workers, pools)
    if not devices:
        mismatches = [m for m in mismatches if "does not advertise" not in m]
    if crd:
        found = api.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{RAYSERVICE_CRD}")
        mismatches += check_crd(found, spec)
    return mismatches
