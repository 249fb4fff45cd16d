"""What the e2e reads back from the cluster: the RayCluster a RayService made, its pods, and where the
scheduler put them (or why it could not)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from ray_llm_eks.adapters.kube_client import KubeClient
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL

POLL = 0.5


def wait_for(what: str, probe: Callable[[], object], timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not seen within {timeout:.0f} s")
        time.sleep(POLL)


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def create_crds(api: KubeClient, paths: Iterable[Path]) -> list[str]:
    """Each CustomResourceDefinition file created on the API server; their names, in order."""
    names = []
    for path in paths:
        crd = yaml.safe_load(path.read_text())
        api.request("POST", CRDS, crd)
        names.append(crd["metadata"]["name"])
    return names


def crds_established(api: KubeClient, names: list[str]) -> Callable[[], bool]:
    """A probe: every named CRD has condition Established (the API server serves its kind)."""

    def established() -> bool:
        for name in names:
            conditions = (api.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    return established


def pods_of(api: KubeClient, ns: str, cluster_name: str) -> list[dict]:
    return api.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=ray.io/cluster={cluster_name}")["items"]


def ray_cluster_of(api: KubeClient, ns: str, service: str) -> dict | None:
    items = api.get(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters")["items"]
    owned = [c for c in items if any(o.get("name") == service for o in c["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def scheduling_problems(api: KubeClient, pods: list[dict], node_labels: dict[str, dict]) -> list[str]:
    """Why pods are not where they belong: Unschedulable (with the scheduler's reason), unbound, or
    bound to a node of the wrong pool. The head belongs on the system pool, each worker on its group's pool."""
    problems = []
    for pod in pods:
        name = pod["metadata"]["name"]
        for cond in pod.get("status", {}).get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                problems.append(f"pod {name} is {cond.get('reason')}: {cond.get('message')}")
                break
        else:
            node = pod["spec"].get("nodeName")
            if not node:
                problems.append(f"pod {name} is not bound to a node yet")
                continue
            labels = pod["metadata"].get("labels", {})
            want = "system" if labels.get("ray.io/node-type") == "head" else labels.get("ray.io/group")
            pool = node_labels.get(node, {}).get(POOL_NODE_LABEL)
            if pool != want:
                problems.append(f"pod {name} landed on {node} ({POOL_NODE_LABEL}={pool}), not {POOL_NODE_LABEL}={want}")
    return problems


def wait_scheduled(
    api: KubeClient, ns: str, service: str, expect_workers: dict[str, int], nodes: dict, timeout: float,
    placed: bool = False,
):  # fmt: skip
    """Wait until the operator made the RayCluster and its pods and the scheduler judged every pod.
    Returns (raycluster, pods, problems); problems is [] when all sit on the right pools. `placed`: the pods
    must end up placed, so an Unschedulable verdict is waited out until `timeout`: a replacement cluster's
    pods can be judged while the replaced cluster's still hold the nodes, and the scheduler tries them again
    once those are gone."""
    deadline = time.monotonic() + timeout
    last: tuple = (None, [], ["no RayCluster yet"])
    while time.monotonic() < deadline:
        rc = ray_cluster_of(api, ns, service)
        if rc is not None:
            pods = [p for p in pods_of(api, ns, rc["metadata"]["name"]) if not p["metadata"].get("deletionTimestamp")]
            groups: dict[str, int] = {}
            heads = 0
            for p in pods:
                labels = p["metadata"].get("labels", {})
                if labels.get("ray.io/node-type") == "head":
                    heads += 1
                else:
                    groups[labels.get("ray.io/group", "?")] = groups.get(labels.get("ray.io/group", "?"), 0) + 1
            problems = scheduling_problems(api, pods, nodes)
            judged = all("not bound" not in p for p in problems)
            last = (
                rc,
                pods,
                problems
                if heads == 1 and groups == expect_workers
                else [f"pods so far: head {heads}, workers {groups}"],
            )
            if heads == 1 and groups == expect_workers and judged and not (placed and problems):
                return last
        time.sleep(POLL)
    return last


def object_path(api_version: str, kind: str, ns: str | None, name: str) -> str:
    plural = kind.lower() + "s" if not kind.endswith("y") else kind.lower()[:-1] + "ies"  # the kinds we create
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{ns}/{plural}/{name}" if ns else f"{base}/{plural}/{name}"


def wait_for_gone(api: KubeClient, path: str, timeout: float) -> bool:
    try:
        wait_for(path, lambda: api.get_or_none(path) is None, timeout)
        return True
    except TimeoutError:
        return False
