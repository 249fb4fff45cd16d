"""Karpenter for real, on the e2e's API server: the Karpenter controller of the pinned release (its core,
sigs.k8s.io/karpenter, with the kwok cloud provider of the same module, built by go_binaries/build.py) makes and
removes the GPU nodes our NodePools describe, for the pods the real KubeRay operator makes of our
RayService, bound by the real kube-scheduler.

Real here: our NodePools (ray_llm_eks/domain/render/karpenter.py, as the program renders them) admitted by the pinned
CRDs (offline/schemas/), Karpenter's provisioner, scheduler simulation, registration, consolidation and
termination, the KubeRay operator, the scheduler, our RayService. Stand-ins: the kwok provider's
KWOKNodeClass for our EC2NodeClass (which is only admitted, by a server-side dry run: no EC2 here) and
its instance types, written from OUR instance table (ray_llm_eks/domain/platform/: aws_facts.py, prices from prices.py,
spot at a stand-in fraction of on-demand). Emulated: the Ray autoscaler's patch (Ray 2.58's own code, as
in e2e/scale_up.py), and what sigs.k8s.io/kwok's controller would do for a kwok node: the harness marks
Karpenter's new Node Ready and keeps it so (e2e/cluster.py adopt_nodes), as it does its own nodes
(Karpenter's kwok provider creates the Node with no condition and Phase Pending: kwok/cloudprovider
cloudprovider.go toNode; a node that never turns Ready is never initialized, and is never consolidated).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from e2e.observe import crds_established, create_crds, pods_of, ray_cluster_of, wait_for
from e2e.scale_up import JSON_PATCH, ray_autoscaler_patch
from ray_llm_eks.adapters.kube_client import KubeError
from ray_llm_eks.adapters.ports import free_port
from ray_llm_eks.domain.core.facts import EFA_RESOURCE, GPU_RESOURCE, POOL_NODE_LABEL
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.placement import GPU_TAINT
from ray_llm_eks.domain.platform.prices import INSTANCE_USD_PER_HOUR
from ray_llm_eks.domain.platform.subnets import private_subnet_name
from ray_llm_eks.domain.render import karpenter
from ray_llm_eks.domain.render.ray_service import ray_service_spec

SCHEMAS = Path(__file__).resolve().parents[1] / "offline" / "schemas"
VENDORED_CRDS = ("karpenter.sh_nodepools.v1.14.1.yaml", "karpenter.k8s.aws_ec2nodeclasses.v1.14.1.yaml")

# The stack: xpyd's roles (prefill and decode, each its own pool and bounds) with Karpenter making the
# GPU nodes and prefill allowed on spot; two system nodes with room for Karpenter's controller.
STACK_OVERRIDES = {
    "ray-llm-eks:nodeProvisioning": "karpenter",
    "ray-llm-eks:prefillSpot": True,
    "ray-llm-eks:systemNodes": {"instanceType": "m7i.2xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 3},
}
# Test-only: the shipped consolidateAfter (ray_llm_eks/domain/render/karpenter.py CONSOLIDATE_AFTER, 10m; tests/unit)
# would make the e2e wait ten minutes for each empty node.
E2E_CONSOLIDATE_AFTER = "15s"
# A stand-in: kwok offerings need a price per capacity type and our price table has on-demand only.
SPOT_FRACTION = 0.4
KWOK_GROUP, KWOK_KIND = "karpenter.kwok.sh", "KWOKNodeClass"
KWOK_NODE_LABEL = "kwok.x-k8s.io/node"  # kwok/apis/v1alpha1/labels.go KwokLabelKey, on every Node it makes
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # pkg/apis/v1/labels.go NodePoolLabelKey
CAPACITY_TYPE_LABEL = karpenter.CAPACITY_TYPE_LABEL
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NS = "e2e-karpenter"
SERVICE = "kwok-pd"
DRIFT_LABEL = "ray-llm-eks/e2e-drift"  # a template label the e2e adds: drift, as any template change is
# the component passes its node role's name (ray_llm_eks/components/karpenter.py)
STAND_IN_NODE_ROLE = "e2e-stand-in-node-role"


# -- what the harness hands Karpenter (pure) ------------------------------------------------------


def instance_types(settings, region: str) -> list[dict]:
    """The kwok provider's instance-types file (kwok/cloudprovider/helpers.go InstanceTypeOptions; offerings as
    its embedded instance_types.json writes them: Price, Available, Requirements): every type a GPU pool's
    NodePool allows, sized from our instance table, with its GPUs and, where it has EFA, one EFA device per
    network card (what our EC2NodeClass's interfaces give, ray_llm_eks/domain/render/karpenter.py network_interfaces),
    offered in each pool's zone on-demand at our price and on spot at SPOT_FRACTION of it."""
    prices = INSTANCE_USD_PER_HOUR[region]
    zones = sorted({p.availability_zone for p in settings.gpu_pools.values()})
    names = sorted({t for p in settings.gpu_pools.values() for t in karpenter.fitting_instance_types(p)})
    out = []
    for name in names:
        spec = aws_facts.INSTANCE_SPECS[name]
        resources = {
            "cpu": str(spec.vcpus),
            "memory": f"{spec.memory_gib}Gi",
            "pods": str(spec.max_pods),
            GPU_RESOURCE: str(spec.gpus),
        }
        if spec.efa:
            resources[EFA_RESOURCE] = str(spec.network_cards)
        offerings = [
            {
                "Price": round(prices[name] * (SPOT_FRACTION if capacity == karpenter.SPOT else 1.0), 4),
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                ],
            }
            for zone in zones
            for capacity in (karpenter.ON_DEMAND, karpenter.SPOT)
        ]
        out.append(
            {
                "name": name,
                "offerings": offerings,
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": resources,
            }
        )
    return out


def kwok_node_pools(settings, consolidate_after: str = E2E_CONSOLIDATE_AFTER) -> list[dict]:
    """Our NodePools as the program renders them (ray_llm_eks/domain/render/karpenter.py node_pool, spot as the stack
    allows), each pointing at a KWOKNodeClass of the pool's name instead of its EC2NodeClass; consolidateAfter
    shortened."""
    out = []
    for pool in settings.gpu_pools.values():
        ref = karpenter.NodeClassRef(KWOK_GROUP, KWOK_KIND, pool.name)
        np = karpenter.node_pool(pool, ref, spot=settings.node_provisioning.spot(pool.app_role))
        np["spec"]["disruption"]["consolidateAfter"] = consolidate_after
        out.append(np)
    return out


def ec2_node_classes(settings) -> list[dict]:
    """Our EC2NodeClasses (ray_llm_eks/domain/render/karpenter.py ec2_node_class) with the selectors
    ray_llm_eks.stack_args.karpenter_args gives them (not importable from here: a sibling layer) and a
    stand-in node role."""
    return [
        karpenter.ec2_node_class(
            pool,
            node_role=STAND_IN_NODE_ROLE,
            subnet_tags={"Name": private_subnet_name(settings.cluster.name, settings.network.gpu_availability_zone)},
            security_group_tags={"aws:eks:cluster-name": settings.cluster.name},
            placement_group=f"{settings.cluster.name}-{pool.name}" if pool.efa else None,
        )
        for pool in settings.gpu_pools.values()
    ]


def node_verdict(node: dict, pool: str, capacity_type: str, instance_type: str) -> list[str]:
    """What is wrong with a node Karpenter made for `pool`: its NodePool, our pool label and GPU taint (what the
    role's worker selects and tolerates), its capacity type and instance type (the cheapest fitting offer)."""
    labels = node["metadata"].get("labels", {})
    taints = node.get("spec", {}).get("taints") or []
    problems = []
    for key, want in (
        (NODEPOOL_LABEL, pool),
        (POOL_NODE_LABEL, pool),
        (CAPACITY_TYPE_LABEL, capacity_type),
        (INSTANCE_TYPE_LABEL, instance_type),
        (KWOK_NODE_LABEL, "fake"),
    ):
        if labels.get(key) != want:
            problems.append(f"{key}={labels.get(key)}, not {want}")
    gpu_taint = {"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NoSchedule"}
    if not any(all(t.get(k) == v for k, v in gpu_taint.items()) for t in taints):
        problems.append(f"no GPU taint {gpu_taint} in {taints}")
    return problems


def disruptions(log_text: str) -> list[tuple[str, str, list[str]]]:
    """(method, decision, node names) of each disruption Karpenter's JSON log records ("disrupting node(s)",
    pkg/controllers/disruption/queue.go; its command reads "<Method>/<id>: <decision>: ...")."""
    out = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("message") == "disrupting node(s)":
            method = entry.get("command", "").split("/", 1)[0]
            nodes = [d["Node"]["name"] for d in entry.get("disrupted-nodes", [])]
            out.append((method, entry.get("decision", ""), nodes))
    return out


# -- the scenario ---------------------------------------------------------------------------------


class KwokScaling:
    """On a cluster with system nodes only (e2e/cluster.py LocalCluster); `checks` and `log` are the e2e's."""

    def __init__(self, cluster, settings, karpenter_dir: Path, log, checks):
        self.cluster, self.api = cluster, cluster.api
        self.settings, self.dir, self.log, self.checks = settings, karpenter_dir, log, checks
        self.pools = settings.gpu_pools
        self.timings: dict[str, float] = {}
        self.rc_name = ""

    def run(self) -> None:
        self.install_crds()
        self.admission()
        if not self.start_karpenter():
            return
        rc = self.deploy()
        if rc is None:
            return
        nodes = {}
        for role in ("prefill", "decode"):
            node = self.scale_from_zero(role)
            if node is None:
                return
            nodes[role] = node
        self.scale_down(nodes)

    # -- CRDs and admission ------------------------------------------------------------------------

    def install_crds(self) -> None:
        paths = [SCHEMAS / name for name in VENDORED_CRDS] + sorted((self.dir / "crds").glob("*.yaml"))
        names = create_crds(self.api, paths)
        wait_for(f"Karpenter CRDs {names} established", crds_established(self.api, names), 60)
        self.log(
            f"Karpenter CRDs: {names} (NodePool, EC2NodeClass: vendored offline/schemas/; the rest from the module)"
        )

    def _dry_run_apply(self, obj: dict) -> dict:
        kind, name = obj["kind"], obj["metadata"]["name"]
        plural = {"NodePool": "nodepools", "EC2NodeClass": "ec2nodeclasses"}[kind]
        path = f"/apis/{obj['apiVersion']}/{plural}/{name}?dryRun=All&fieldManager=e2e&force=true"
        return self.api.request("PATCH", path, obj, "application/apply-patch+yaml")

    def admission(self) -> None:
        """Our EC2NodeClasses and NodePools (with their EC2NodeClass refs) through the API server's validation
        against the pinned CRDs, by server-side dry-run apply, every field kept; a NodePool asking for a label
        of the AWS provider's restricted domain is refused, so the validation is there to fail."""
        from e2e.checks import unkept_fields

        rendered = [
            *ec2_node_classes(self.settings),
            *(
                karpenter.node_pool(
                    p, karpenter.ec2_node_class_ref(p), spot=self.settings.node_provisioning.spot(p.app_role)
                )
                for p in self.pools.values()
            ),
        ]
        for obj in rendered:
            what = f"{obj['kind']} {obj['metadata']['name']}"
            try:
                live = self._dry_run_apply(obj)
                unkept = unkept_fields(obj["spec"], live["spec"])
                self.checks.expect(
                    not unkept,
                    f"the API server admits our {what} against the pinned CRD, every field kept",
                    str(unkept),
                )
            except KubeError as e:
                self.checks.fail(f"the API server admits our {what} against the pinned CRD: {e}")
        bad = copy.deepcopy(rendered[-1])
        bad["metadata"]["name"] = "e2e-restricted-label"
        bad["spec"]["template"]["spec"]["requirements"].append(
            {"key": "karpenter.k8s.aws/not-a-label", "operator": "In", "values": ["x"]}
        )
        try:
            self._dry_run_apply(bad)
            refused = ""
        except KubeError as e:
            refused = str(e)
        self.checks.expect(
            'label domain "karpenter.k8s.aws" is restricted' in refused,
            "the pinned NodePool CRD refuses a requirement on an unknown karpenter.k8s.aws label",
            refused or "admitted",
        )

    # -- Karpenter ---------------------------------------------------------------------------------

    def start_karpenter(self) -> bool:
        work = self.cluster.dir
        types = instance_types(self.settings, self.settings.region)
        (work / "kwok-instance-types.json").write_text(json.dumps(types, indent=1))
        self.log(
            "STAND-IN for EC2: Karpenter's kwok provider with KWOKNodeClass in place of our EC2NodeClass; "
            f"instance types from ray_llm_eks/domain/platform/aws_facts.py: {[t['name'] for t in types]} with "
            f"{sorted({k for t in types for k in t['resources']})}, spot at {SPOT_FRACTION} x on-demand (stand-in)"
        )
        # Leader election off (one replica, as the e2e's other controllers); ports free ones: its metrics
        # and probe servers bind every interface (pkg/operator/operator.go formats ":<port>").
        env = {
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(free_port()),
            "INSTANCE_TYPES_FILE_PATH": str(work / "kwok-instance-types.json"),
            "LOG_LEVEL": "debug",  # JSON lines; disruptions() reads its "disrupting node(s)" entries
        }
        self.cluster.spawn("karpenter", [str(self.dir / "karpenter-kwok")], env)
        self.cluster.adopt_nodes(f"{KWOK_NODE_LABEL}=fake")
        for pool in self.pools.values():
            self.api.request(
                "POST",
                f"/apis/{KWOK_GROUP}/v1alpha1/kwoknodeclasses",
                {"apiVersion": f"{KWOK_GROUP}/v1alpha1", "kind": KWOK_KIND, "metadata": {"name": pool.name}},
            )
        pools = kwok_node_pools(self.settings)
        for np in pools:
            self.api.request("POST", "/apis/karpenter.sh/v1/nodepools", np)
        self.log(
            f"our NodePools {[np['metadata']['name'] for np in pools]} applied as "
            f"ray_llm_eks/domain/render/karpenter.py has them, "
            f"nodeClassRef {KWOK_KIND}; TEST-ONLY consolidateAfter {E2E_CONSOLIDATE_AFTER} "
            f"(shipped: {karpenter.CONSOLIDATE_AFTER}, tests/unit/domain/cluster/test_karpenter.py)"
        )

        def ready() -> bool:
            for np in pools:
                live = self.api.get(f"/apis/karpenter.sh/v1/nodepools/{np['metadata']['name']}")
                conds = (live.get("status") or {}).get("conditions") or []
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                    return False
            return True

        try:
            wait_for("Karpenter's NodePools Ready", ready, 90)
        except TimeoutError as e:
            self.checks.fail(f"{e}: see {work}/logs/karpenter.log")
            return False
        self.checks.ok(f"Karpenter {self.dir.name} runs and reports our NodePools Ready")
        return True

    # -- the RayService and its pods --------------------------------------------------------------

    def gpu_nodes(self) -> list[dict]:
        return [
            n
            for n in self.api.get("/api/v1/nodes")["items"]
            if n["metadata"].get("labels", {}).get(POOL_NODE_LABEL) in self.pools
        ]

    def deploy(self) -> dict | None:
        """Our RayService with every worker group at 0 (minReplicas too): the GPU pools start empty."""
        self.api.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
        wait_for(
            f"default ServiceAccount in {NS}",
            lambda: self.api.get_or_none(f"/api/v1/namespaces/{NS}/serviceaccounts/default"),
            60,
        )
        spec = ray_service_spec(self.settings)
        for g in spec["rayClusterConfig"]["workerGroupSpecs"]:
            g["minReplicas"] = g["replicas"] = 0
        body = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": SERVICE, "namespace": NS}}
        self.api.request("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayservices", {**body, "spec": spec})
        self.log("our RayService (xpyd + nodeProvisioning karpenter) applied with TEST-ONLY 0 workers per group")
        try:
            rc = wait_for("the operator's RayCluster", lambda: ray_cluster_of(self.api, NS, SERVICE), 60)
            wait_for(
                "the head pod bound",
                lambda: any(p["spec"].get("nodeName") for p in pods_of(self.api, NS, rc["metadata"]["name"])),
                60,
            )
        except TimeoutError as e:
            self.checks.fail(str(e))
            return None
        annotations = {
            g["groupName"]: g["template"]["metadata"].get("annotations", {})
            for g in spec["rayClusterConfig"]["workerGroupSpecs"]
        }
        self.checks.expect(
            all(a.get("karpenter.sh/do-not-disrupt") == "true" for a in annotations.values()),
            "our Ray workers carry karpenter.sh/do-not-disrupt",
            str(annotations),
        )
        self.checks.expect(not self.gpu_nodes(), "no GPU node before any worker is asked for")
        self.rc_name = rc["metadata"]["name"]
        return rc

    def _raycluster(self) -> dict:
        return self.api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{self.rc_name}")

    def _workers(self, role: str) -> list[dict]:
        return [
            p
            for p in pods_of(self.api, NS, self.rc_name)
            if p["metadata"].get("labels", {}).get("ray.io/group") == role
            and not p["metadata"].get("deletionTimestamp")
        ]

    def _scale(self, role: str, replicas: int, delete: list[dict] | None = None) -> None:
        from ray.autoscaler._private.kuberay.node_provider import KubeRayNodeProvider, node_data_from_pod
        from ray.autoscaler.batching_node_provider import ScaleRequest

        rc = self._raycluster()
        if delete:
            # Ray's provider knows each pod as it read it (get_node_data: node_data_from_pod, by pod name).
            provider = object.__new__(KubeRayNodeProvider)
            provider.node_data_dict = {p["metadata"]["name"]: node_data_from_pod(p) for p in delete}
            request = ScaleRequest(desired_num_workers={role: replicas}, workers_to_delete=set(provider.node_data_dict))
            patch = provider._scale_request_to_patch_payload(request, rc)
        else:
            patch = ray_autoscaler_patch(rc, role, replicas)
        self.log(f"EMULATED Ray autoscaler (Ray 2.58's KubeRay node provider code): {patch}")
        self.api.request("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{self.rc_name}", patch, JSON_PATCH)

    def expected(self, role: str) -> tuple[str, str]:
        """(capacity type, instance type) of the node Karpenter should make for `role`: the cheapest offer our
        NodePool allows (spot first where it allows spot; the cheapest fitting type)."""
        pool = self.pools[role]
        capacity = karpenter.capacity_types(self.settings.node_provisioning.spot(pool.app_role))[0]
        prices = INSTANCE_USD_PER_HOUR[self.settings.region]
        return capacity, min(karpenter.fitting_instance_types(pool), key=lambda t: prices[t])

    def scale_from_zero(self, role: str) -> dict | None:
        """One worker of `role` asked for: Karpenter makes one node, of that role's NodePool only, and the
        scheduler binds the pod there."""
        before = {n["metadata"]["name"] for n in self.gpu_nodes()}
        start = time.monotonic()
        self._scale(role, 1)
        try:
            pod = wait_for(
                f"the {role} worker bound to a node",
                lambda: next((p for p in self._workers(role) if p["spec"].get("nodeName")), None),
                180,
            )
        except TimeoutError as e:
            self.checks.fail(f"{e}: see {self.cluster.dir}/logs/karpenter.log")
            return None
        secs = time.monotonic() - start
        self.timings[role] = secs
        new = [n for n in self.gpu_nodes() if n["metadata"]["name"] not in before]
        node = self.api.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
        capacity, cheapest = self.expected(role)
        problems = node_verdict(node, role, capacity, cheapest)
        self.log(
            f"REAL Karpenter (kwok provider): node {node['metadata']['name']} for {role} in {secs:.1f} s: "
            f"{ {k: v for k, v in node['metadata']['labels'].items() if 'karpenter' in k or 'pool' in k} }"
        )
        self.checks.expect(
            [n["metadata"]["name"] for n in new] == [node["metadata"]["name"]] and not problems,
            f"from zero: one {role} worker makes one node, of the {role} NodePool only ({capacity}, {cheapest}, "
            f"pool label and GPU taint), and the pod binds to it in {secs:.1f} s",
            f"new nodes {[n['metadata']['name'] for n in new]}; {problems}",
        )
        return node

    def scale_down(self, nodes: dict[str, dict]) -> None:
        """Prefill shrinks to 0 (the worker Ray deletes, as its autoscaler asks): its node goes once empty for
        consolidateAfter; the decode node, running a do-not-disrupt serving replica, stays."""
        (pod,) = self._workers("prefill")
        empty_at = time.monotonic()
        self._scale("prefill", 0, [pod])
        prefill_node = nodes["prefill"]["metadata"]["name"]
        consolidate = int(E2E_CONSOLIDATE_AFTER.rstrip("s"))
        try:
            wait_for(
                f"node {prefill_node} removed",
                lambda: self.api.get_or_none(f"/api/v1/nodes/{prefill_node}") is None,
                consolidate + 120,
            )
            gone = time.monotonic() - empty_at
            self.timings["prefill removed"] = gone
            self.checks.expect(
                gone >= consolidate and ("Empty", "delete", [prefill_node]) in self.disruptions(),
                f"the emptied prefill node is removed by consolidation (Karpenter's log: Empty, delete) {gone:.1f} s "
                f"after its pod, not before consolidateAfter {E2E_CONSOLIDATE_AFTER}",
                str(self.disruptions()),
            )
        except TimeoutError as e:
            self.checks.fail(f"{e}: see {self.cluster.dir}/logs/karpenter.log")
        # Past another consolidateAfter and the disruption controller's 10 s poll: the decode node is still there
        # (what keeps it here is the policy; drift() below shows what do-not-disrupt adds).
        time.sleep(consolidate + 15)
        decode_node = nodes["decode"]["metadata"]["name"]
        still = self.api.get_or_none(f"/api/v1/nodes/{decode_node}")
        on_it = [p["metadata"]["name"] for p in self._workers("decode") if p["spec"].get("nodeName") == decode_node]
        self.checks.expect(
            still is not None and not still["metadata"].get("deletionTimestamp") and len(on_it) == 1,
            f"the decode node running its worker is kept ({consolidate + 15} s after prefill's went): WhenEmpty "
            "consolidates only empty nodes",
            f"node {'gone' if still is None else 'deleting' if still['metadata'].get('deletionTimestamp') else 'kept'}"
            f", decode workers on it {on_it}",
        )
        if still is not None and on_it:
            self.drift(decode_node, on_it[0])
        start = time.monotonic()
        self.api.request("DELETE", f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{SERVICE}")
        try:
            wait_for(
                "every GPU node removed after the RayService went", lambda: not self.gpu_nodes(), consolidate + 150
            )
            secs = time.monotonic() - start
            self.timings["decode removed"] = secs
            self.checks.ok(f"after the RayService is deleted its last GPU node goes too ({secs:.1f} s)")
        except TimeoutError as e:
            self.checks.fail(f"{e}: {[n['metadata']['name'] for n in self.gpu_nodes()]}")
        self.log(f"Karpenter kwok timings (s): { {k: round(v, 1) for k, v in self.timings.items()} }")

    def disruptions(self) -> list[tuple[str, str, list[str]]]:
        return disruptions((self.cluster.dir / "logs" / "karpenter.log").read_text(errors="replace"))

    def _node_claim(self, node_name: str) -> dict | None:
        claims = self.api.get("/apis/karpenter.sh/v1/nodeclaims")["items"]
        return next((c for c in claims if (c.get("status") or {}).get("nodeName") == node_name), None)

    def drift(self, node_name: str, pod_name: str) -> None:
        """The decode NodePool's template changes (a label): Karpenter marks the node Drifted and would replace
        it, but keeps it while its worker is annotated do-not-disrupt (our NodePools set no
        terminationGracePeriod, which would bound that: pkg/controllers/disruption/types.go); without the
        annotation the same node is replaced, and the operator's new worker binds to the new node."""
        path = "/apis/karpenter.sh/v1/nodepools/decode"
        self.api.request(
            "PATCH",
            path,
            {"spec": {"template": {"metadata": {"labels": {DRIFT_LABEL: "1"}}}}},
            "application/merge-patch+json",
        )
        self.log(f"the decode NodePool's template gets label {DRIFT_LABEL}=1 (a change that drifts its nodes)")

        def drifted() -> bool:
            claim = self._node_claim(node_name)
            conds = ((claim or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Drifted" and c["status"] == "True" for c in conds)

        try:
            wait_for(f"node {node_name}'s NodeClaim Drifted", drifted, 90)
        except TimeoutError as e:
            self.checks.fail(f"{e}: see {self.cluster.dir}/logs/karpenter.log")
            return
        time.sleep(30)  # three of the disruption controller's 10 s polls
        claims = self.api.get("/apis/karpenter.sh/v1/nodeclaims")["items"]
        node = self.api.get_or_none(f"/api/v1/nodes/{node_name}")
        kept = self.checks.expect(
            node is not None and not node["metadata"].get("deletionTimestamp") and len(claims) == 1,
            "drifted, the decode node is kept while its worker is annotated karpenter.sh/do-not-disrupt (30 s)",
            f"node {'gone' if node is None else 'there'}, NodeClaims {[c['metadata']['name'] for c in claims]}",
        )
        if not kept:
            return
        start = time.monotonic()
        self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{pod_name}",
            {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": None}}},
            "application/merge-patch+json",
        )
        self.log(f"TEST-ONLY: the annotation karpenter.sh/do-not-disrupt removed from {pod_name}")

        def replaced() -> dict | None:
            if self.api.get_or_none(f"/api/v1/nodes/{node_name}") is not None:
                return None
            return next((p for p in self._workers("decode") if p["spec"].get("nodeName")), None)

        try:
            pod = wait_for(f"node {node_name} replaced and the decode worker bound again", replaced, 180)
        except TimeoutError as e:
            self.checks.fail(f"{e}: see {self.cluster.dir}/logs/karpenter.log")
            return
        secs = time.monotonic() - start
        self.timings["drift replacement"] = secs
        new = self.api.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
        self.checks.expect(
            new["metadata"]["labels"].get(DRIFT_LABEL) == "1"
            and not node_verdict(new, "decode", *self.expected("decode"))
            and ("Drifted", "replace", [node_name]) in self.disruptions(),
            f"without the annotation the drifted node is replaced (Karpenter's log: Drifted, replace; {secs:.1f} s): "
            "the operator's new decode worker binds to a decode node with the new label",
            f"{new['metadata']['name']}: {new['metadata']['labels']}; {self.disruptions()}",
        )
