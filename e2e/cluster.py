"""A real Kubernetes control plane on 127.0.0.1 for the e2e: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and the KubeRay operator, all built by go_binaries/build.py, with certificates
generated here. Nodes are Node objects shaped from OUR instance table (labels, taints, allocatable
after the reservations ray_llm_eks.domain.platform.sizing assumes, GPU/EFA resources) whose Ready status and Lease this
harness keeps fresh; no kubelet runs, so pods are bound by the real scheduler and never started
(Ray never runs: the RayService never turns Ready). Like a kubelet, the harness confirms the
deletion of pods on its nodes once they are marked for deletion.

Only loopback addresses are used: every listener binds 127.0.0.1 on a free port, service IPs come
from 127.96.0.0/16, node addresses from 127.0.1.0/24.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from e2e.observe import crds_established, create_crds
from ray_llm_eks.adapters.kube_client import KubeClient, KubeError
from ray_llm_eks.adapters.ports import free_port
from ray_llm_eks.domain.core.facts import EFA_RESOURCE, GPU_RESOURCE
from ray_llm_eks.domain.platform import aws_facts, sizing
from ray_llm_eks.domain.platform.placement import GPU_TAINT, SYSTEM_LABELS, gpu_labels

PROMETHEUS_OPERATOR_CRDS = Path(__file__).resolve().parents[1] / "offline" / "schemas"

SERVICE_CIDR = "127.96.0.0/16"  # loopback: no address outside 127.0.0.0/8 anywhere
NODE_IP_PREFIX = "127.0.1."
_EFFECT = {"NO_SCHEDULE": "NoSchedule"}


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeShape:
    name: str
    instance_type: str
    labels: Mapping[str, str]
    taints: tuple[dict, ...] = ()
    extended: Mapping[str, int] = field(default_factory=dict)


def node_shapes(system_type: str, system_count: int, pools: Mapping[str, tuple[str, int, bool]]) -> list[NodeShape]:
    """Nodes as our EKS node groups make them: `pools[pool name] = (instance type, count, efa)`."""
    shapes = [
        NodeShape(f"system-{i}", system_type, {**SYSTEM_LABELS, "node.kubernetes.io/instance-type": system_type})
        for i in range(system_count)
    ]
    taint = {"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": _EFFECT[GPU_TAINT["effect"]]}
    for pool, (itype, count, efa) in pools.items():
        spec = aws_facts.INSTANCE_SPECS[itype]
        extended = {GPU_RESOURCE: spec.gpus}
        if efa:
            extended[EFA_RESOURCE] = spec.network_cards  # pulumi-eks: one EFA interface per network card
        shapes += [
            NodeShape(
                f"{pool}-{i}",
                itype,
                {**gpu_labels(pool), "node.kubernetes.io/instance-type": itype},
                (taint,),
                extended,
            )
            for i in range(count)
        ]
    return shapes


def node_object(shape: NodeShape, index: int) -> tuple[dict, dict]:
    """(Node to create, its status): capacity from the instance table, allocatable from
    ray_llm_eks.domain.platform.sizing."""
    spec = aws_facts.INSTANCE_SPECS[shape.instance_type]
    alloc = sizing.allocatable(spec)
    capacity = {"cpu": str(spec.vcpus), "memory": f"{int(spec.memory_gib * 1024)}Mi", "pods": str(spec.max_pods)}
    allocatable = {"cpu": f"{alloc.cpu_m}m", "memory": f"{alloc.memory_mib}Mi", "pods": str(spec.max_pods)}
    for k, v in shape.extended.items():
        capacity[k] = allocatable[k] = str(v)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": shape.name, "labels": {"kubernetes.io/hostname": shape.name, **shape.labels}},
        "spec": {"taints": list(shape.taints)} if shape.taints else {},
    }
    status = {
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [
            {"type": "InternalIP", "address": f"{NODE_IP_PREFIX}{index + 1}"},
            {"type": "Hostname", "address": shape.name},
        ],
        "conditions": [ready_condition()],
        "nodeInfo": {"kubeletVersion": "v1.35.4", "architecture": "amd64", "operatingSystem": "linux"},
    }
    return node, status


def ready_condition() -> dict:
    t = now()
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "e2e harness keeps this node Ready",
        "lastHeartbeatTime": t,
        "lastTransitionTime": t,
    }


class LocalCluster:
    def __init__(self, workdir: Path, bins: Mapping[str, Path], log: Callable[[str], None]):
        self.dir = workdir
        self.bins = bins
        self.log = log
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.api: KubeClient | None = None
        self.node_names: list[str] = []
        self._stop = threading.Event()
        self._adopt_selector: str | None = None  # nodes made by others (Karpenter) that this harness keeps Ready
        self.adopted: list[str] = []
        self._thread: threading.Thread | None = None
        self.kubelet_errors: list[str] = []

    # -- processes ---------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
        logf = open(self.dir / "logs" / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        full_env = {**os.environ, **env} if env else None
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, env=full_env)
        self.procs.append((name, proc))
        self.log(f"started {name} (pid {proc.pid})")
        return proc

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
        """Start one more controller against this cluster (stopped with it); `env` on top of ours."""
        return self._spawn(name, argv, env)

    def stop_process(self, name: str) -> None:
        for pname, proc in list(self.procs):
            if pname == name:
                self._kill(pname, proc)
                self.procs.remove((pname, proc))

    def _kill(self, name: str, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.log(f"stopped {name} (pid {proc.pid}, exit {proc.returncode})")

    def alive(self, name: str) -> bool:
        return any(p == name and proc.poll() is None for p, proc in self.procs)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        for name, proc in reversed(self.procs):
            self._kill(name, proc)
        self.procs.clear()

    # -- certificates ------------------------------------------------------------------------

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.dir / "pki", check=True, capture_output=True)

    def _certs(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(parents=True)
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                      "-days", "2", "-subj", "/CN=ray-llm-eks-e2e-ca")  # fmt: skip
        (pki / "server.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
        )
        (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        for name, subj, ext in (
            ("apiserver", "/CN=kube-apiserver", "server.ext"),
            ("admin", "/O=system:masters/CN=e2e-admin", "client.ext"),  # system:masters: cluster-admin
        ):
            self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                          "-subj", subj)  # fmt: skip
            self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                          "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext)  # fmt: skip
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def _write_kubeconfig(self, port: int) -> None:
        """Self-contained (certificates inline): the e2e hands its text to the stack as a secret."""
        pki = self.dir / "pki"

        def b64(name: str) -> str:
            return base64.b64encode((pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                     "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": "admin", "user": {"client-certificate-data": b64("admin.crt"),
                                                 "client-key-data": b64("admin.key")}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }  # fmt: skip
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    # -- start -------------------------------------------------------------------------------

    def start(self, shapes: list[NodeShape]) -> None:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self._certs()
        pki = self.dir / "pki"
        etcd_client, etcd_peer = free_port(), free_port()
        self._spawn("etcd", [
            str(self.bins["etcd"] / "etcd"), "--name", "e2e", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--quota-backend-bytes", str(2 * 1024**3),
        ])  # fmt: skip
        api_port = free_port()
        kube = self.bins["kube"]
        self._spawn("kube-apiserver", [
            str(kube / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{etcd_client}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(api_port),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", SERVICE_CIDR,
            # Endpoints may not hold loopback addresses (API validation): no `kubernetes` endpoint.
            "--endpoint-reconciler-type", "none",
            "--authorization-mode", "Node,RBAC",
            "--allow-privileged=true",  # our GPU workers run privileged (NIXL + EFA)
            # On by default at this version (pkg/kubeapiserver/options/plugins.go, defaultOnPlugins); named so
            # that the e2e's PodSecurity checks (e2e/admission.py) cannot lose it to a changed default.
            "--enable-admission-plugins", "PodSecurity",
            "--profiling=false",
        ])  # fmt: skip
        self._write_kubeconfig(api_port)
        self.api = KubeClient.from_kubeconfig(self.kubeconfig.read_text())
        self._wait("kube-apiserver /readyz", lambda: self._readyz(), 90)
        common = ["--kubeconfig", str(self.kubeconfig), "--authentication-kubeconfig", str(self.kubeconfig),
                  "--authorization-kubeconfig", str(self.kubeconfig), "--bind-address", "127.0.0.1",
                  "--leader-elect=false"]  # fmt: skip
        self._spawn("kube-controller-manager", [
            str(kube / "kube-controller-manager"), *common, "--secure-port", str(free_port()),
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--service-cluster-ip-range", SERVICE_CIDR, "--use-service-account-credentials=false",
        ])  # fmt: skip
        self._spawn("kube-scheduler", [str(kube / "kube-scheduler"), *common, "--secure-port", str(free_port())])
        self._nodes(shapes)
        self._thread = threading.Thread(target=self._kubelet_loop, name="e2e-kubelet", daemon=True)
        self._thread.start()
        self._crds()
        self._wait(
            "default ServiceAccount",
            lambda: self.api.get_or_none("/api/v1/namespaces/default/serviceaccounts/default"),
            60,
        )
        self._spawn("kuberay-operator", [
            str(self.bins["kuberay-operator"] / "ray-operator"), "--kubeconfig", str(self.kubeconfig),
            "--enable-leader-election=false",
            "--metrics-addr", f"127.0.0.1:{free_port()}", "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
            "--log-stdout-encoder", "console",
        ])  # fmt: skip

    def _readyz(self) -> bool:
        try:
            self.api.request("GET", "/readyz")
            return True
        except (KubeError, ValueError):
            return False

    def _wait(self, what: str, probe: Callable[[], object], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited ({proc.returncode}) while waiting for {what}: see {self.dir}/logs/{name}.log"
                    )
            if probe():
                self.log(f"{what}: ok")
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not ready after {timeout:.0f} s")

    def _crds(self) -> None:
        """KubeRay's CRDs, and the Prometheus Operator's that our monitors need (PodMonitor, ServiceMonitor,
        PrometheusRule: the vendored v0.93.0 ones, the schema the chart's v0.93.1 operator serves), as a
        cluster that runs both has them."""
        crd_dir = self.bins["kuberay-operator"] / "crds"
        # The RayService CRD of the chart we install (v1.7.0, vendored): the e2e's v1.6.2 operator's lacks
        # gcsFaultToleranceOptions.backend and .storage, which the API server would prune without a word.
        paths = [
            *sorted(p for p in crd_dir.glob("*.yaml") if "rayservices" not in p.name),
            PROMETHEUS_OPERATOR_CRDS / "ray.io_rayservices.v1.7.0.yaml",
            *sorted(PROMETHEUS_OPERATOR_CRDS.glob("monitoring.coreos.com_*.yaml")),
        ]
        names = create_crds(self.api, paths)
        self._wait(f"CRDs {names} established", crds_established(self.api, names), 60)

    def _nodes(self, shapes: list[NodeShape]) -> None:
        for i, shape in enumerate(shapes):
            node, status = node_object(shape, i)
            self.add_node({**node, "status": status})
        self.log(f"registered nodes {self.node_names}")

    def add_node(self, node: dict) -> None:
        """Register a Node (its status patched in, as a kubelet does) and keep it Ready from now on.
        Returns once the scheduler may use it: the API server's TaintNodesByCondition admission gives
        every new Node the taint node.kubernetes.io/not-ready:NoSchedule, which the node lifecycle
        controller removes only after it saw the node Ready; a pod judged before that is refused for
        the taint, not for what the node offers."""
        name = node["metadata"]["name"]
        status = {"conditions": [ready_condition()], **node["status"]}
        self.api.request("POST", "/api/v1/nodes", {k: v for k, v in node.items() if k != "status"})
        self.api.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                         "application/strategic-merge-patch+json")  # fmt: skip
        self.node_names.append(name)

        def schedulable() -> bool:
            taints = self.api.get(f"/api/v1/nodes/{name}").get("spec", {}).get("taints") or []
            return all(t.get("key") != NOT_READY_TAINT for t in taints)

        self._wait(f"node {name} without the {NOT_READY_TAINT} taint", schedulable, 60)

    def remove_node(self, name: str) -> None:
        """Take a node out (no pod may be on it: none is evicted)."""
        self.node_names.remove(name)
        self.api.request("DELETE", f"/api/v1/nodes/{name}")

    # -- what a kubelet would do -------------------------------------------------------------

    def adopt_nodes(self, label_selector: str) -> None:
        """From now on, nodes that match `label_selector` and that another controller creates (Karpenter's
        kwok provider) are treated as this harness's own: given addresses, node info and Ready, kept Ready,
        their pods' deletions confirmed. What sigs.k8s.io/kwok's controller does for such nodes."""
        self._adopt_selector = label_selector

    def _adopt(self) -> None:
        if not self._adopt_selector:
            return
        for node in self.api.get(f"/api/v1/nodes?labelSelector={self._adopt_selector}")["items"]:
            name = node["metadata"]["name"]
            if name in self.node_names or name in self.adopted or node["metadata"].get("deletionTimestamp"):
                continue
            status = {
                "conditions": [ready_condition()],
                "addresses": [{"type": "InternalIP", "address": f"{NODE_IP_PREFIX}{100 + len(self.adopted)}"},
                              {"type": "Hostname", "address": name}],
                "nodeInfo": {"kubeletVersion": "v1.35.4", "architecture": "amd64", "operatingSystem": "linux"},
                "phase": "Running",
            }  # fmt: skip
            self.api.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                             "application/strategic-merge-patch+json")  # fmt: skip
            self.adopted.append(name)
            self.node_names.append(name)
            self.log(f"EMULATED kwok controller: node {name} (made by Karpenter) marked Ready")

    def _heartbeat(self) -> None:
        for name in list(self.node_names):  # the e2e adds and removes nodes meanwhile
            try:
                self.api.request("PATCH", f"/api/v1/nodes/{name}/status",
                                 {"status": {"conditions": [ready_condition()]}},
                                 "application/strategic-merge-patch+json")  # fmt: skip
            except KubeError as e:
                if e.status == 404 and name not in self.node_names:
                    continue  # removed since the copy
                if e.status == 404 and name in self.adopted:
                    self.node_names.remove(name)  # its maker deleted it: no kubelet is left to report
                    continue
                raise
            path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec}  # fmt: skip
            try:
                self.api.request("PATCH", path, {"spec": lease["spec"]}, "application/merge-patch+json")
            except KubeError as e:
                if e.status != 404:
                    raise
                self.api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)

    def _confirm_deletions(self) -> None:
        pods = self.api.get("/api/v1/pods").get("items", [])
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and pod.get("spec", {}).get("nodeName") in self.node_names:
                try:
                    now_please = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
                    self.api.request(
                        "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", now_please
                    )
                except KubeError as e:
                    if e.status != 404:
                        raise

    def _kubelet_loop(self) -> None:
        last_beat = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() - last_beat > 10:  # kubelet's default nodeStatusUpdateFrequency
                    self._heartbeat()
                    last_beat = time.monotonic()
                self._adopt()
                self._confirm_deletions()
            except (KubeError, OSError) as e:
                self.kubelet_errors.append(str(e))
            self._stop.wait(1.0)
