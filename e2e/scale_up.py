"""The scale-up chain on the real operator and scheduler: a stack whose roles autoscale (xpyd), a new
worker asked for the way Ray's autoscaler asks, the pod the real KubeRay operator makes for it left
Pending by the real kube-scheduler, and the node the Cluster Autoscaler would add for that pool,
built only from the ASG tags our program declares, taking it.

Real here: the Pulumi engine and our program, the API server, the KubeRay operator, the scheduler,
our node-template tags. Emulated: the Ray autoscaler's patch (Ray 2.58's own patch builder, sent by
us: no Ray runs in these pods) and the Cluster Autoscaler's node (its AWS provider's template built
by e2e/template_node.py and registered by us: that provider needs AWS's Auto Scaling API).
"""

from __future__ import annotations

import re

from e2e.cluster import node_object, node_shapes
from e2e.observe import object_path, pods_of, wait_for, wait_scheduled
from e2e.template_node import CAPACITY_SOURCE, template_node
from ray_llm_eks.domain.core.facts import EFA_RESOURCE as EFA
from ray_llm_eks.domain.core.facts import GPU_RESOURCE as GPU
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.fit.scaling import node_template_tags

JSON_PATCH = "application/json-patch+json"
NOT_SELECTED = "node(s) didn't match Pod's node affinity/selector"


def ray_autoscaler_patch(raycluster: dict, group: str, replicas: int) -> list[dict]:
    """The JSON patch Ray 2.58's KubeRay node provider sends to grow `group` to `replicas`, made by its
    own code (KubeRayNodeProvider._scale_request_to_patch_payload: capped at the group's maxReplicas,
    nothing when unchanged). Its constructor reads in-cluster credentials, which a scale-up never uses."""
    from ray.autoscaler._private.kuberay.node_provider import KubeRayNodeProvider
    from ray.autoscaler.batching_node_provider import ScaleRequest

    provider = object.__new__(KubeRayNodeProvider)
    return provider._scale_request_to_patch_payload(ScaleRequest(desired_num_workers={group: replicas}), raycluster)


def unschedulable_counts(message: str) -> tuple[int, dict[str, int]]:
    """The scheduler's FitError message as (nodes, {reason: how many nodes gave it}), e.g. (1.35)
    '0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match ... . no new claims to
    deallocate, preemption: ...': its first sentence (a reason holds dots, never ". ")."""
    found = re.match(r"0/(\d+) nodes are available: (.*)", message.split(". ", 1)[0].rstrip("."))
    if not found:
        raise ValueError(f"not a scheduler FitError message: {message!r}")
    counts = {}
    for item in found.group(2).split(", "):
        n, reason = item.split(" ", 1)
        counts[reason] = int(n)
    return int(found.group(1)), counts


def _unschedulable(pod: dict) -> str | None:
    for cond in pod.get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
            return cond.get("message", "")
    return None


def _group(pod: dict) -> str:
    labels = pod["metadata"].get("labels", {})
    return "head" if labels.get("ray.io/node-type") == "head" else labels.get("ray.io/group", "?")


def _live_pods(api, ns: str, cluster: str) -> list[dict]:
    return [p for p in pods_of(api, ns, cluster) if not p["metadata"].get("deletionTimestamp")]


def _bounds(cluster: dict) -> dict[str, tuple[int, int]]:
    return {g["groupName"]: (g.get("minReplicas"), g.get("maxReplicas")) for g in cluster["spec"]["workerGroupSpecs"]}


class ScaleUp:
    """The scenario on one stack, cluster and namespace; `checks` and `log` are the e2e's."""

    def __init__(self, stack, cluster, cfg: dict, settings, kubeconfig: str, log, checks):
        self.stack, self.cluster, self.api = stack, cluster, cluster.api
        self.cfg, self.settings, self.kubeconfig = cfg, settings, kubeconfig
        self.log, self.checks = log, checks
        self.ns, self.svc = settings.serving.namespace, settings.serving.service_name
        self.pools = settings.gpu_pools
        self.grow = "prefill" if "prefill" in self.pools else next(iter(self.pools))
        self.other = next(r for r in self.pools if r != self.grow)

    def run(self) -> None:
        rc = self.deploy()
        if rc is None:
            return
        pending = self.ask_for_a_worker(rc)
        if pending is None:
            return
        self.add_template_nodes(rc, pending)
        self.change_max_replicas(rc)

    def operator_reconciles(self) -> int:
        """RayService reconciles the KubeRay operator has logged (each after reconcileRayCluster)."""
        log = (self.cluster.dir / "logs" / "kuberay-operator.log").read_text(errors="replace")
        mine = f'"RayService": {{"name":"{self.svc}","namespace":"{self.ns}"}}'
        return sum(1 for line in log.splitlines() if "Reconciling the Serve applications for" in line and mine in line)

    def node_labels(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n["metadata"]["labels"] for n in self.api.get("/api/v1/nodes")["items"]}

    def wait_pod(self, what: str, cluster: str, probe, timeout: float = 60) -> dict | None:
        try:
            return wait_for(
                what, lambda: next((p for p in _live_pods(self.api, self.ns, cluster) if probe(p)), None), timeout
            )
        except TimeoutError as e:
            self.checks.fail(str(e))
            return None

    # 1. The stack: roles with their own bounds, KubeRay's autoscaler on.
    def deploy(self) -> dict | None:
        sysn = self.settings.cluster.system_nodes
        sizes = {r: (p.nodes.instance_type, p.nodes.desired_size, p.efa) for r, p in self.pools.items()}
        for shape in node_shapes(sysn.instance_type, sysn.desired_size, sizes):
            if shape.name not in self.cluster.node_names:
                node, status = node_object(shape, len(self.cluster.node_names))
                self.cluster.add_node({**node, "status": status})
                self.log(f"registered node {shape.name} (the stack's desired size)")
        self.stack.configure(self.cfg, self.kubeconfig)
        res = self.stack.up("xpyd stack: prefill and decode autoscale, each with its own bounds")
        self.checks.expect(res.summary.result == "succeeded", "pulumi up of the xpyd stack succeeds")
        live = self.api.get(object_path("ray.io/v1", "RayService", self.ns, self.svc))
        self.checks.expect(
            live["spec"]["rayClusterConfig"].get("enableInTreeAutoscaling") is True,
            "the live RayService has enableInTreeAutoscaling on",
        )
        workers = {r: p.nodes.desired_size for r, p in self.pools.items()}
        rc, pods, problems = wait_scheduled(self.api, self.ns, self.svc, workers, self.node_labels(), 120)
        ok = self.checks.expect(
            rc is not None and not problems,
            f"the operator's pods {workers} schedule on their pools",
            "; ".join(problems),
        )
        if not ok:
            return None
        head = next(p for p in pods if _group(p) == "head")
        containers = [c["name"] for c in head["spec"]["containers"]]
        self.checks.expect(
            "autoscaler" in containers, "the head pod has KubeRay's autoscaler container", str(containers)
        )
        want = {r: (p.nodes.min_size, p.nodes.max_size) for r, p in self.pools.items()}
        self.checks.expect(
            _bounds(rc) == want,
            f"each worker group's (minReplicas, maxReplicas) is the plan's {want}",
            str(_bounds(rc)),
        )
        return rc

    # 2. A new worker, asked for as Ray's autoscaler asks: the operator's pod stays Pending.
    def ask_for_a_worker(self, rc: dict) -> dict | None:
        name = rc["metadata"]["name"]
        before = {p["metadata"]["uid"]: p for p in _live_pods(self.api, self.ns, name)}
        replicas = next(g["replicas"] for g in rc["spec"]["workerGroupSpecs"] if g["groupName"] == self.grow)
        patch = ray_autoscaler_patch(rc, self.grow, replicas + 1)
        self.log(f"EMULATED Ray autoscaler (Ray 2.58's KubeRay node provider code, sent by the e2e): {patch}")
        self.api.request("PATCH", f"/apis/ray.io/v1/namespaces/{self.ns}/rayclusters/{name}", patch, JSON_PATCH)
        pod = self.wait_pod(
            f"a new {self.grow} worker, Unschedulable",
            name,
            lambda p: p["metadata"]["uid"] not in before and _unschedulable(p) is not None,
        )
        if pod is None:
            return None
        message = _unschedulable(pod)
        self.log(f"REAL scheduler on {pod['metadata']['name']}: {message}")
        pool_nodes = sum(1 for labels in self.node_labels().values() if labels.get(POOL_NODE_LABEL) == self.grow)
        _, counts = unschedulable_counts(message)
        self.checks.expect(
            _group(pod) == self.grow and counts.get(f"Insufficient {GPU}") == pool_nodes,
            f"the operator's new {self.grow} pod is Pending, Unschedulable: Insufficient {GPU} on "
            f"the pool's {pool_nodes} nodes",
            message,
        )
        after = {p["metadata"]["uid"] for p in _live_pods(self.api, self.ns, name)} - {pod["metadata"]["uid"]}
        self.checks.expect(
            after == set(before),
            f"no other pod changed (head, {self.other}, the other {self.grow})",
            f"before {sorted(before)}, after {sorted(after)}",
        )
        return pod

    # 3. The node the Cluster Autoscaler would ask for, from our tags only; the wrong ones do not take it.
    def template(self, name: str, role: str, drop: str | None = None) -> dict:
        pool = self.pools[role]
        tags = node_template_tags(pool.name, pool.spec, pool.efa)
        tags = {k: v for k, v in tags.items() if not (drop and k.endswith(drop))}
        return template_node(name, pool.nodes.instance_type, tags, self.settings.region, pool.availability_zone)

    def add_template_nodes(self, rc: dict, pending: dict) -> None:
        name = rc["metadata"]["name"]
        nodes, counts = unschedulable_counts(_unschedulable(pending))
        wrong = {
            f"{self.other}-asg-template": self.template(f"{self.other}-asg-template", self.other),
            f"{self.grow}-asg-template-no-efa": self.template(f"{self.grow}-asg-template-no-efa", self.grow, f"/{EFA}"),
        }
        for node in wrong.values():
            self.cluster.add_node(node)
        self.log(
            f"EMULATED Cluster Autoscaler (its AWS provider's buildNodeFromTemplate, redone by e2e/template_node.py; "
            f"{CAPACITY_SOURCE}): template nodes from our ASG tags, {self.other}'s and {self.grow}'s "
            f"without the {EFA} resource tag: {sorted(wrong)}"
        )
        # A rejected pod is retried only on events that may help it; a fresh pod (the operator replaces
        # the one deleted) is judged against every node now registered.
        self.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{pending['metadata']['name']}")
        retried = self.wait_pod(
            f"the operator's replacement {self.grow} pod, Unschedulable",
            name,
            lambda p: (
                _group(p) == self.grow
                and p["metadata"]["uid"] != pending["metadata"]["uid"]
                and not p["spec"].get("nodeName")
                and _unschedulable(p) is not None
            ),
        )
        if retried is None:
            return
        message = _unschedulable(retried)
        self.log(f"REAL scheduler with the wrong template nodes: {message}")
        nodes2, counts2 = unschedulable_counts(message)
        self.checks.expect(
            nodes2 == nodes + 2 and counts2.get(NOT_SELECTED) == counts.get(NOT_SELECTED, 0) + 1,
            f"a node from {self.other}'s tags does not take the {self.grow} pod (not selected)",
            message,
        )
        self.checks.expect(
            counts2.get(f"Insufficient {EFA}") == counts.get(f"Insufficient {EFA}", 0) + 1
            and counts2.get(f"Insufficient {GPU}") == counts.get(f"Insufficient {GPU}"),
            f"a {self.grow} node without the {EFA} resources tag cannot take it (Insufficient {EFA}; it has its GPU)",
            message,
        )
        right = self.template(f"{self.grow}-asg-template", self.grow)
        self.cluster.add_node(right)
        self.log(
            f"EMULATED Cluster Autoscaler: {right['metadata']['name']} from {self.grow}'s ASG tags: "
            f"labels {right['metadata']['labels']}, taints {right['spec'].get('taints')}, "
            f"capacity {right['status']['capacity']}"
        )
        bound = self.wait_pod(
            f"{retried['metadata']['name']} bound",
            name,
            lambda p: p["metadata"]["uid"] == retried["metadata"]["uid"] and p["spec"].get("nodeName"),
        )
        self.checks.expect(
            bound is not None and bound["spec"]["nodeName"] == right["metadata"]["name"],
            f"the pending {self.grow} pod binds to the node built from {self.grow}'s ASG tags",
            str(bound and bound["spec"].get("nodeName")),
        )
        for node in wrong:
            self.cluster.remove_node(node)

    # 4. A new maxReplicas for one role through `pulumi up`.
    def change_max_replicas(self, rc: dict) -> None:
        path = object_path("ray.io/v1", "RayService", self.ns, self.svc)
        service = self.api.get(path)
        index = [g["groupName"] for g in rc["spec"]["workerGroupSpecs"]].index(self.grow)
        old_max = rc["spec"]["workerGroupSpecs"][index]["maxReplicas"]
        new_max = old_max + 1
        # Why the program replaces on a bound change: KubeRay leaves worker bounds out of its cluster
        # hash, so a RayService updated in place never passes a new bound to its running RayCluster.
        self.api.request(
            "PATCH",
            path,
            [
                {
                    "op": "replace",
                    "value": new_max,
                    "path": f"/spec/rayClusterConfig/workerGroupSpecs/{index}/maxReplicas",
                }
            ],
            JSON_PATCH,
        )
        # The operator never reaches its status update here (it stops at "The head Pod is not ready"),
        # so status.observedGeneration stays put: two reconciles logged after the patch show it saw it.
        seen = self.operator_reconciles()
        wait_for("two RayService reconciles after the patch", lambda: self.operator_reconciles() >= seen + 2, 60)
        kept = self.api.get(f"/apis/ray.io/v1/namespaces/{self.ns}/rayclusters/{rc['metadata']['name']}")
        self.checks.expect(
            _bounds(kept)[self.grow][1] == old_max,
            f"KubeRay keeps the running RayCluster's {self.grow} maxReplicas {old_max} when only the "
            f"RayService's changes in place (to {new_max}): an in-place bound change would be lost",
            str(_bounds(kept)),
        )
        cfg = {**self.cfg, "ray-llm-eks:autoscaling": {self.grow: {"maxReplicas": new_max}}}
        self.stack.configure(cfg, self.kubeconfig)
        self.stack.up(f"{self.grow} maxReplicas {old_max} -> {new_max}")
        ops = self.stack.step_ops("kubernetes:ray.io/v1:RayService")
        delete_first = "delete-replaced" in ops and "create-replacement" in ops
        delete_first = delete_first and ops.index("delete-replaced") < ops.index("create-replacement")
        self.checks.expect(delete_first, "a bound change replaces the RayService delete-first", str(ops))
        live = self.api.get(path)
        self.checks.expect(live["metadata"]["uid"] != service["metadata"]["uid"], "a new RayService object exists")
        workers = {r: p.nodes.desired_size for r, p in self.pools.items()}
        new_rc, _, problems = wait_scheduled(self.api, self.ns, self.svc, workers, self.node_labels(), 120, placed=True)
        want = {**_bounds(rc), self.grow: (_bounds(rc)[self.grow][0], new_max)}
        self.checks.expect(
            new_rc is not None
            and new_rc["metadata"]["name"] != rc["metadata"]["name"]
            and _bounds(new_rc) == want
            and not problems,
            f"the new RayCluster has {self.grow} maxReplicas {new_max}, {self.other}'s bounds as "
            f"they were {want[self.other]}, and its pods schedule",
            f"{new_rc and _bounds(new_rc)}; {'; '.join(problems)}",
        )
