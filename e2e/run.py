"""The in-cluster half for real: our Pulumi program, run by the real Pulumi engine (CLI built from
Go modules) with the real pulumi-kubernetes provider, in existing-cluster mode, against a real
kube-apiserver, kube-scheduler and kube-controller-manager with the real KubeRay operator
(e2e/cluster.py), all on 127.0.0.1. Only the AWS half stays on mocks (tests/).

The program is the repository's own __main__.py, run as an Automation API inline program: the
Pulumi CLI talks to this process's language server, so no `pulumi-language-python` plugin is
needed (the Go module proxy serves no version of that module), and no aws/eks plugin either
(the engine loads a provider only when a resource of it is registered).

After the seed stack (Pulumi.dev.yaml) and its destroy, the xpyd stack shows scaling: a worker asked
for as Ray's autoscaler asks, and the node the Cluster Autoscaler would add (e2e/scale_up.py).
Then the Pulumi YAML example through the real CLI and YAML language host (e2e/yaml_example.py). Last, on a
second control plane with system nodes only, Karpenter (its kwok provider) makes and removes the GPU nodes
of our NodePools (e2e/karpenter.py).

Usage: python -m e2e.run [--cluster-only | --yaml-only | --karpenter-only]   (after `python -m go_binaries.build`;
`make e2e` runs both)
--cluster-only: no Pulumi; only the control plane, the operator and the scheduling checks.
--yaml-only: only the control plane, the operator and the Pulumi YAML example (e2e/yaml_example.py).
--karpenter-only: only the second control plane and Karpenter (e2e/karpenter.py).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import runpy
import secrets
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e import yaml_example as yaml_run  # noqa: E402
from e2e.admission import stack_namespaces_admit  # noqa: E402
from e2e.checks import max_model_lens, names_failed_resource, unkept_fields  # noqa: E402
from e2e.cluster import LocalCluster, node_shapes  # noqa: E402
from e2e.karpenter import STACK_OVERRIDES as KARPENTER_STACK  # noqa: E402
from e2e.karpenter import KwokScaling  # noqa: E402
from e2e.observe import object_path, ray_cluster_of, wait_for, wait_for_gone, wait_scheduled  # noqa: E402
from e2e.scale_up import ScaleUp  # noqa: E402
from e2e.upgrades import kill_up_while_creating, new_cluster_beside_old, pending_operations  # noqa: E402
from go_binaries import build  # noqa: E402
from ray_llm_eks.adapters import stack as stack_adapter  # noqa: E402
from ray_llm_eks.adapters.kube_client import KubeClient  # noqa: E402
from ray_llm_eks.components import llm_service  # noqa: E402
from ray_llm_eks.domain.cluster import gcs_ft  # noqa: E402
from ray_llm_eks.domain.core.config_keys import default  # noqa: E402
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL  # noqa: E402
from ray_llm_eks.domain.platform import cluster_checks, versions  # noqa: E402
from ray_llm_eks.domain.render.ray_service import ray_service_spec, served_document  # noqa: E402
from ray_llm_eks.domain.security import ray_auth  # noqa: E402
from ray_llm_eks.domain.serving import api_keys  # noqa: E402
from ray_llm_eks.domain.serving.serve_app import document_dict  # noqa: E402
from ray_llm_eks.domain.telemetry import observability  # noqa: E402

STACK = "e2e"
BASE_STACK_FILE = REPO / "Pulumi.dev.yaml"  # the seed deployment: 1 system node, prefill + decode
SCALING_STACK_FILE = REPO / "Pulumi.xpyd.yaml"  # prefill and decode autoscale, each with its own bounds
NS = "llm"  # the stack's namespace (default)
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
SHORT_TIMEOUT = 20  # test-only serviceReadyTimeoutSeconds (the stack minimum is 600)


class Timeline:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def log(self, message: str) -> None:
        t = time.monotonic() - self.start
        self.events.append((t, message))
        print(f"[{t:7.1f}s] {message}", flush=True)

    def print(self) -> None:
        print("\n== timeline")
        for t, message in self.events:
            print(f"  {t:7.1f}s  {message}")


class Checks:
    def __init__(self, timeline: Timeline) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.timeline = timeline

    def ok(self, what: str) -> None:
        self.passed.append(what)
        self.timeline.log(f"PASS {what}")

    def fail(self, what: str) -> None:
        self.failed.append(what)
        self.timeline.log(f"FAIL {what}")

    def expect(self, condition: bool, what: str, detail: str = "") -> bool:
        if condition:
            self.ok(what)
        else:
            self.fail(f"{what}: {detail}" if detail else what)
        return condition


# -- the stack --------------------------------------------------------------------------------


def base_config(stack_file: Path = BASE_STACK_FILE) -> dict:
    return yaml.safe_load(stack_file.read_text())["config"]


def settings_of(stack_file: Path, overrides: dict | None = None):
    """The Settings our program derives from a stack file's config, deployed as the e2e stack."""
    name = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    config = stack_adapter.stack_file(name, REPO, overrides)
    return stack_adapter.load_settings(replace(config, stack=STACK))


EXISTING_CLUSTER = {
    "ray-llm-eks:existingCluster": True,
    "ray-llm-eks:installKubeRay": False,  # Helm charts cannot be fetched here; the harness runs KubeRay
    "ray-llm-eks:installDevicePlugins": False,  # the harness's nodes advertise GPU and EFA themselves
    "ray-llm-eks:waitForReady": False,  # fake pods never run Ray: the RayService never turns Ready
    # The harness's API server has the Prometheus Operator's CRDs (e2e/cluster.py), as a cluster running
    # one does: our monitors, rule and dashboards go to it (no chart can be fetched here).
    "ray-llm-eks:observability": {"mode": "external"},
    # At up the program asks ECR which digest the DLC tag names (ray_llm_eks/adapters/registry.py), through pulumi-aws,
    # which the e2e has neither plugin nor credentials for: the image comes pinned, as the program's own
    # error tells a stack to. The digest is made up; no kubelet here pulls it.
    "ray-llm-eks:image": f"{settings_of(BASE_STACK_FILE).serving.image}@sha256:{'e2e0' * 16}",
    "ray-llm-eks:rayVersion": versions.DLC_IMAGES[default("dlcImageTag")].ray,
}


class Stack:
    """Our program as an Automation API inline program on a local file backend in `work`."""

    def __init__(self, work: Path, env: dict[str, str], timeline: Timeline):
        from pulumi import automation as auto

        self.auto = auto
        self.timeline = timeline
        self.project = work / "project"
        self.project.mkdir(parents=True)
        # The real Pulumi.yaml: the CLI checks the e2e stack against it as against any other.
        (self.project / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
        self.ready_timeout: int | None = None
        self.api_key = secrets.token_hex(24)  # this run's apiKeys: must never be readable in the state
        # The Ray cluster's token, set as a user may: unset, pulumi-random makes one, whose plugin cannot be built
        # here (the Go module proxy refuses github.com/pulumi/pulumi-random/provider).
        self.ray_token = secrets.token_hex(24)
        self.outputs: list[str] = []  # what the CLI printed for each up
        self.stack = auto.create_or_select_stack(
            stack_name=STACK,
            project_name="ray-llm-eks",
            program=self._program,
            opts=auto.LocalWorkspaceOptions(work_dir=str(self.project), env_vars=env, secrets_provider="passphrase"),
        )
        self.events: list = []

    def _program(self) -> None:
        if self.ready_timeout is not None:
            # Test-only: a timeout shorter than the stack minimum (600 s), so the timeout path runs in seconds.
            # LlmServiceArgs hold the same minimum: their check lets this one value through too.
            real, real_check = stack_adapter.load_settings, llm_service.check_ready_timeout

            def shorter(config):
                s = real(config)
                return replace(s, serving=replace(s.serving, ready_timeout_seconds=self.ready_timeout))

            def allow_short(key, value, file=None):
                return value if value == self.ready_timeout else real_check(key, value, file)

            stack_adapter.load_settings, llm_service.check_ready_timeout = shorter, allow_short
            try:
                runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")
            finally:
                stack_adapter.load_settings, llm_service.check_ready_timeout = real, real_check
        else:
            runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")

    def configure(self, cfg: dict, kubeconfig: str) -> None:
        path = self.project / f"Pulumi.{STACK}.yaml"
        doc = yaml.safe_load(path.read_text()) if path.exists() else {}
        doc = doc or {}
        doc["config"] = {k: v for k, v in cfg.items()}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.stack.set_config("ray-llm-eks:kubeconfig", self.auto.ConfigValue(kubeconfig, secret=True))
        # As `make stack` sets it: `pulumi up` refuses a stack without a key.
        self.stack.set_config("ray-llm-eks:apiKeys", self.auto.ConfigValue(self.api_key, secret=True))
        self.stack.set_config("ray-llm-eks:rayAuthToken", self.auto.ConfigValue(self.ray_token, secret=True))

    def up(self, what: str):
        self.events = []
        self.timeline.log(f"pulumi up: {what}")
        result = self.stack.up(on_event=self.events.append, color="never")
        self.outputs.append(result.stdout + result.stderr)
        self.timeline.log(f"pulumi up done ({what}): {result.summary.resource_changes}")
        return result

    def preview(self, what: str):
        self.timeline.log(f"pulumi preview: {what}")
        return self.stack.preview(color="never")

    def destroy(self):
        self.events = []
        self.timeline.log("pulumi destroy")
        result = self.stack.destroy(on_event=self.events.append, color="never")
        self.timeline.log(f"pulumi destroy done: {result.summary.resource_changes}")
        return result

    def step_ops(self, type_token: str) -> list[str]:
        """Operations the engine started on resources of `type_token`, in order."""
        ops = []
        for e in self.events:
            pre = getattr(e, "resource_pre_event", None)
            if pre is not None and pre.metadata.type == type_token:
                ops.append(str(pre.metadata.op.value if hasattr(pre.metadata.op, "value") else pre.metadata.op))
        return ops


def state_kubernetes_objects(stack) -> list[tuple[str, str, str | None, str]]:
    """(apiVersion, kind, namespace, name) of every Kubernetes object in the stack's state."""
    out = []
    for r in stack.export_stack().deployment.get("resources", []):
        t = r.get("type", "")
        if not t.startswith("kubernetes:") or t.startswith("pulumi:providers:"):
            continue
        o = r.get("outputs", {})
        meta = o.get("metadata", {})
        out.append((o.get("apiVersion"), o.get("kind"), meta.get("namespace"), meta.get("name")))
    return out


def state_input_spec(stack, type_token: str) -> dict:
    """The spec the program sent for the one resource of `type_token` (its inputs in the state)."""
    resources = stack.export_stack().deployment.get("resources", [])
    (spec,) = [r["inputs"]["spec"] for r in resources if r.get("type") == type_token]
    return spec


# -- scenario ---------------------------------------------------------------------------------


def run(
    work: Path,
    timeline: Timeline,
    checks: Checks,
    cluster_only: bool = False,
    yaml_only: bool = False,
    karpenter_only: bool = False,
) -> None:
    bins = build.bin_dirs()
    needed = ("etcd", "kube", "kuberay-operator") if cluster_only else tuple(bins)
    if karpenter_only:
        needed = ("etcd", "kube", "kuberay-operator", "karpenter-kwok")
    for name, d in bins.items():
        if name in needed and not (d / ".built").is_file():
            raise SystemExit(f"e2e: {name} is not built under {d}: run `python -m go_binaries.build` (make e2e does)")
    cfg = base_config()
    settings = settings_of(BASE_STACK_FILE)
    pools = {r: (p.nodes.instance_type, p.nodes.desired_size, p.efa) for r, p in settings.gpu_pools.items()}
    sysn = settings.cluster.system_nodes
    shapes = node_shapes(sysn.instance_type, sysn.desired_size, pools)

    if not karpenter_only:
        try:
            in_cluster(work, bins, cfg, settings, shapes, timeline, checks, cluster_only, yaml_only)
        except Exception:  # the Karpenter part runs on a control plane of its own: it still says what it shows
            checks.fail("e2e run raised:\n" + traceback.format_exc())
    if not (cluster_only or yaml_only):
        karpenter_section(work, bins, timeline, checks)


def in_cluster(work, bins, cfg, settings, shapes, timeline, checks, cluster_only: bool, yaml_only: bool) -> None:
    cluster = LocalCluster(work / "cluster", bins, timeline.log)
    try:
        cluster.start(shapes)
        api = cluster.api
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in api.get("/api/v1/nodes")["items"]}
        timeline.log(f"control plane up; nodes {sorted(nodes)}")
        if yaml_only:
            (work / "state").mkdir()
            yaml_example(work, cluster, timeline, checks)
        elif cluster_only:
            # Without the Pulumi half: the scheduling checks on our RayService applied straight to the API.
            negative_cases(api, settings, nodes, timeline, checks)
        else:
            scenario(work, cluster, api, cfg, settings, nodes, timeline, checks)
    finally:
        timeline.log("stopping everything the e2e started")
        cluster.stop()
        if cluster.kubelet_errors:
            timeline.log(f"harness kubelet loop errors (last 3): {cluster.kubelet_errors[-3:]}")


def karpenter_section(work: Path, bins: dict[str, Path], timeline: Timeline, checks: Checks) -> None:
    """Karpenter's kwok provider making our GPU pools' nodes on a control plane of its own, whose only nodes
    are the system nodes of the Karpenter stack (e2e/karpenter.py)."""
    settings = settings_of(SCALING_STACK_FILE, KARPENTER_STACK)
    sysn = settings.cluster.system_nodes
    cluster = LocalCluster(work / "karpenter-cluster", bins, timeline.log)
    timeline.log(
        "Karpenter: REAL Karpenter v1.14.1 (kwok cloud provider), API server, KubeRay operator, scheduler, our "
        "NodePools and RayService; STAND-IN KWOKNodeClass for our EC2NodeClass; EMULATED the Ray autoscaler's "
        "patch and the kwok controller's Ready (docs/rehearsals.md)"
    )
    try:
        cluster.start(node_shapes(sysn.instance_type, sysn.desired_size, {}))
        KwokScaling(cluster, settings, bins["karpenter-kwok"], timeline.log, checks).run()
    finally:
        timeline.log("stopping the Karpenter control plane")
        cluster.stop()
        if cluster.kubelet_errors:
            timeline.log(f"harness kubelet loop errors (last 3): {cluster.kubelet_errors[-3:]}")


def pulumi_env(work: Path, cluster: LocalCluster) -> dict[str, str]:
    """The CLI's environment: the e2e build's binaries, its own home, a local backend; no download."""
    bins = build.bin_dirs()
    return {
        # The engine uses a provider binary found on PATH without downloading anything.
        "PATH": os.pathsep.join([str(bins["pulumi"]), str(bins["pulumi-kubernetes"]), os.environ["PATH"]]),
        "PULUMI_HOME": str(work / "pulumi-home"),
        "PULUMI_BACKEND_URL": f"file://{work / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "e2e-only-passphrase",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "KUBECONFIG": str(cluster.kubeconfig),
    }


def yaml_example(work: Path, cluster: LocalCluster, timeline: Timeline, checks: Checks) -> None:
    """examples/pd-service-yaml through the real CLI and YAML language host (e2e/yaml_example.py): its LlmService
    renders the RayService from typed inputs, nothing made by our Python first."""
    yaml_run.run(work, pulumi_env(work, cluster), cluster.api, yaml_run.example_model(), timeline.log, checks)


def scenario(work, cluster, api, cfg, settings, nodes, timeline, checks) -> None:
    env = pulumi_env(work, cluster)
    (work / "state").mkdir()
    os.environ.update(env)  # the Automation API finds `pulumi` on PATH
    kubeconfig = cluster.kubeconfig.read_text()
    stack = Stack(work, env, timeline)
    cfg = {**cfg, **EXISTING_CLUSTER}
    stack.configure(cfg, kubeconfig)
    workers = {r: p.nodes.desired_size for r, p in settings.gpu_pools.items()}
    svc = settings.serving.service_name

    # 1. First up: every object admitted by the real API server.
    res = stack.up("first deploy, existing-cluster mode, waitForReady false")
    checks.expect(res.summary.result == "succeeded", "first pulumi up succeeds")
    objs = state_kubernetes_objects(stack.stack)
    kinds = sorted(k for _, k, _, _ in objs)
    checks.expect({"Namespace", "RayService"} <= set(kinds), "state holds the namespace and the RayService", str(kinds))
    for av, kind, ns, name in objs:
        live = api.get_or_none(object_path(av, kind, ns, name))
        checks.expect(live is not None, f"API server has {kind} {ns or ''}/{name}")
    sent = state_input_spec(stack.stack, RAY_SERVICE)
    checks.expect(
        sent == ray_service_spec(settings_of(BASE_STACK_FILE, cfg)),
        "the program sent the one builder's RayService spec (ray_llm_eks/domain/render/ray_service.py), keyed",
    )
    live = api.get(object_path("ray.io/v1", "RayService", NS, svc))
    unkept = unkept_fields(sent, live["spec"])
    checks.expect(
        not unkept,
        "the API server kept every field of our RayService spec as sent (none pruned or changed)",
        str(unkept[:5]),
    )
    first_lens = max_model_lens(live["spec"]["serveConfigV2"])
    keys = api.get(f"/api/v1/namespaces/{NS}/secrets/{api_keys.SECRET_NAME}")["data"][api_keys.KEYS_FILE]
    checks.expect(
        base64.b64decode(keys).decode() == f"{stack.api_key}\n",
        "the stack's apiKeys reached the key file the ingress reads (Secret llm/api-keys)",
    )
    token = api.get(f"/api/v1/namespaces/{NS}/secrets/{ray_auth.SECRET_NAME}")["data"][ray_auth.SECRET_KEY]
    checks.expect(
        base64.b64decode(token).decode() == stack.ray_token,
        "the stack's rayAuthToken reached the Secret KubeRay gives every Ray container (llm/ray-auth-token)",
    )
    state = json.dumps(stack.stack.export_stack().deployment)
    checks.expect(
        stack.api_key not in state + "".join(stack.outputs) and stack.ray_token not in state + "".join(stack.outputs),
        "the API key and Ray's token appear in neither the Pulumi state nor the CLI's output (secrets end to end)",
    )
    observability_admitted(stack, api, objs, checks)

    # 2. The operator makes a RayCluster and pods; the scheduler binds each to its pool.
    rc, pods, problems = wait_scheduled(api, NS, svc, workers, nodes, 120)
    checks.expect(rc is not None, "the KubeRay operator turned the RayService into a RayCluster")
    checks.expect(
        not problems,
        f"scheduler bound the head to the system pool and workers {workers} to their pools",
        "; ".join(problems),
    )
    for p in pods:
        timeline.log(f"  pod {p['metadata']['name']} -> {p['spec'].get('nodeName')}")
    # 2b. PodSecurity admission on the namespaces the stack created (e2e/admission.py).
    stack_namespaces_admit(api, stack.stack.export_stack().deployment, NS, "first up", timeline.log, checks)
    first_uid, first_rc = live["metadata"]["uid"], rc and rc["metadata"]["name"]

    # 3. A second up changes nothing.
    res = stack.up("second deploy, nothing changed")
    changes = {k: v for k, v in (res.summary.resource_changes or {}).items() if k != "same"}
    checks.expect(not changes, "a second pulumi up reports no changes", str(changes))

    # 4. A serve-config change updates the RayService in place.
    cfg["ray-llm-eks:maxModelLen"] = 2048
    stack.configure(cfg, kubeconfig)
    res = stack.up("serve-config change (maxModelLen 2048)")
    ops = stack.step_ops("kubernetes:ray.io/v1:RayService")
    checks.expect(ops == ["update"], "a serve-config change updates the RayService in place", str(ops))
    live = api.get(object_path("ray.io/v1", "RayService", NS, svc))
    lens = max_model_lens(live["spec"]["serveConfigV2"])
    checks.expect(
        live["metadata"]["uid"] == first_uid
        and set(lens.values()) == {2048}
        and set(first_lens.values()) == {4096}
        and yaml.safe_load(live["spec"]["serveConfigV2"])
        == document_dict(served_document(settings_of(BASE_STACK_FILE, cfg))),
        "same RayService object; its serveConfigV2 is the new served document, max_model_len 4096 -> 2048 per role",
        f"uid kept {live['metadata']['uid'] == first_uid}, max_model_len before {first_lens}, after {lens}",
    )
    rc2 = ray_cluster_of(api, NS, svc)
    checks.expect(rc2 is not None and rc2["metadata"]["name"] == first_rc, "the RayCluster is kept (no new cluster)")

    # 5. A worker-group change replaces the RayService, delete first; the new pods schedule.
    cfg["ray-llm-eks:privilegedWorkers"] = False
    stack.configure(cfg, kubeconfig)
    res = stack.up("worker-group change (privilegedWorkers false)")
    ops = stack.step_ops("kubernetes:ray.io/v1:RayService")
    delete_first = "delete-replaced" in ops and "create-replacement" in ops
    delete_first = delete_first and ops.index("delete-replaced") < ops.index("create-replacement")
    checks.expect(delete_first, "a worker-group change replaces the RayService delete-first", str(ops))
    live = api.get(object_path("ray.io/v1", "RayService", NS, svc))
    checks.expect(live["metadata"]["uid"] != first_uid, "a new RayService object exists")
    rc, pods, problems = wait_scheduled(api, NS, svc, workers, nodes, 120, placed=True)
    checks.expect(rc is not None and rc["metadata"]["name"] != first_rc and not problems,
                  "the new RayCluster's pods schedule on their pools", "; ".join(problems))  # fmt: skip
    groups = ray_service_spec(settings_of(BASE_STACK_FILE, cfg))["rayClusterConfig"]["workerGroupSpecs"]
    rendered = {g["groupName"]: g["template"]["spec"]["containers"][0]["securityContext"] for g in groups}
    running = {}
    for p in pods:
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker":
            running.setdefault(p["metadata"]["labels"]["ray.io/group"], []).append(
                p["spec"]["containers"][0].get("securityContext")
            )
    checks.expect(
        running == {g: [sc] * workers[g] for g, sc in rendered.items()}
        and not any(sc.get("privileged") for sc in rendered.values()),
        "new worker pods are not privileged: their securityContext is the one rendered for privilegedWorkers false",
        str(running),
    )
    stack_namespaces_admit(api, stack.stack.export_stack().deployment, NS, "privilegedWorkers false", timeline.log,
                           checks)  # fmt: skip

    # 6. Waiting for Ready with a short timeout fails clearly instead of hanging.
    cfg["ray-llm-eks:waitForReady"] = True
    stack.configure(cfg, kubeconfig)
    stack.ready_timeout = SHORT_TIMEOUT
    started = time.monotonic()
    try:
        stack.up(f"waitForReady true, serviceReadyTimeoutSeconds {SHORT_TIMEOUT} (test-only)")
        checks.fail("pulumi up with a short Ready timeout fails")
    except Exception as e:  # the Automation API raises CommandError with the CLI's output
        took = time.monotonic() - started
        text = str(e)
        line = next((ln.strip() for ln in text.splitlines() if "timed out" in ln.lower() or "ready" in ln.lower()), "")
        timeline.log(f"up failed after {took:.0f} s: {line[:300]}")
        checks.expect(
            names_failed_resource(text, RAY_SERVICE, "llm-rayservice"), "the failure names the RayService", text[-400:]
        )
        # pulumi-kubernetes 4.25 words it: '"llm/llm" failed to fully initialize or become live: timed out
        # waiting for the condition' (the condition is our pulumi.com/waitFor condition=Ready).
        checks.expect("timed out waiting for the condition" in text and f"{NS}/{svc}" in text,
                      "the failure says the RayService timed out waiting for its condition", text[-400:])  # fmt: skip
        checks.expect(took < SHORT_TIMEOUT + 120, f"up gave up in {took:.0f} s, not hanging")
    stack.ready_timeout = None
    cfg["ray-llm-eks:waitForReady"] = False
    stack.configure(cfg, kubeconfig)
    stack.up("back to waitForReady false")

    # 7. Our deploy-time checks name each mismatch before anything is applied (real pulumi preview).
    bad = dict(cfg)
    bad["ray-llm-eks:gpuPools"] = copy.deepcopy(cfg["ray-llm-eks:gpuPools"])
    bad["ray-llm-eks:gpuPools"]["decode"]["instanceType"] = "g6.12xlarge"  # 4 GPUs/node; the nodes are g6.8xlarge
    stack.configure(bad, kubeconfig)
    try:
        stack.preview("decode pool declared g6.12xlarge on g6.8xlarge nodes")
        checks.fail("preview against a mismatched cluster fails")
    except Exception as e:
        text = str(e)
        checks.expect("does not advertise nvidia.com/gpu 4" in text and "decode-0" in text,
                      "existing-cluster check names the node that lacks 4 GPUs", text[-600:])  # fmt: skip
        checks.expect("has no room for a worker" in text, "existing-cluster check names the worker that does not fit")
    stack.configure(cfg, kubeconfig)

    # 8. Destroy: the operator outlives the RayService and removes its finalizer; nothing is left.
    # The provider waits for the object to be gone, so a destroy that completes on a RayService holding
    # the operator's finalizer shows the operator was there to remove it.
    before = api.get(object_path("ray.io/v1", "RayService", NS, svc))["metadata"].get("finalizers", [])
    checks.expect(bool(before), "before destroy the RayService holds the operator's finalizer", str(before))
    res = stack.destroy()
    checks.expect(res.summary.result == "succeeded", "pulumi destroy completes")
    checks.expect(
        api.get_or_none(object_path("ray.io/v1", "RayService", NS, svc)) is None and cluster.alive("kuberay-operator"),
        f"the RayService and its finalizer {before} are gone, removed by the still running KubeRay operator",
    )
    left = [
        f"{kind} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        for kind, path in (("RayService", "/apis/ray.io/v1/rayservices"), ("RayCluster", "/apis/ray.io/v1/rayclusters"))
        for o in api.get(path)["items"]
    ]
    checks.expect(not left, "no RayService or RayCluster is left", str(left))
    gone = wait_for_gone(api, f"/api/v1/namespaces/{NS}", 60)
    checks.expect(gone, f"namespace {NS} is gone (no object or finalizer holds it)")
    pods_left = api.get(f"/api/v1/namespaces/{NS}/pods")["items"] if not gone else []
    checks.expect(not pods_left, "no pod is left")

    # 8b. An up killed while it creates the RayService converges when run again (docs/operations.md), and
    # upgradeStrategy NewCluster keeps the old cluster while the new one is pending (e2e/upgrades.py).
    interrupted_up(stack, api, cfg, kubeconfig, svc, objs, timeline, checks)
    prod = settings_of(REPO / "Pulumi.prod.yaml")
    ft_specs = {
        "gcs-redis": ray_service_spec(prod, gcs_ft.redis_address("master.gcs.example.cache.amazonaws.com")),
        "gcs-rocksdb": ray_service_spec(replace(prod, gcs_ft=replace(prod.gcs_ft, backend="rocksdb"))),
    }
    new_cluster_beside_old(api, ray_service_spec(settings_of(BASE_STACK_FILE, cfg)), timeline.log, checks, ft_specs)

    # 9. The scheduling check can fail: a nodeSelector no node carries, a worker bigger than its node
    # (on the now empty nodes, so nothing else competes for them).
    negative_cases(api, settings, nodes, timeline, checks)

    # 10. Scaling per role on the emptied cluster, same (now empty) stack: see e2e/scale_up.py.
    scaling = {**base_config(SCALING_STACK_FILE), **EXISTING_CLUSTER}
    timeline.log(
        "scaling: REAL Pulumi engine + our program, API server, KubeRay operator, scheduler, our ASG tags; "
        "EMULATED the Ray autoscaler's patch and the Cluster Autoscaler's new node (docs/scaling.md)"
    )
    ScaleUp(
        stack, cluster, scaling, settings_of(SCALING_STACK_FILE, EXISTING_CLUSTER), kubeconfig, timeline.log, checks
    ).run()

    # 11. The Pulumi YAML example, through the component package, on the same API server.
    yaml_example(work, cluster, timeline, checks)


def observability_admitted(stack: Stack, api: KubeClient, objs: list, checks: Checks) -> None:
    """The Prometheus Operator's objects and the dashboards, admitted by the real API server against the
    CRDs' schemas, kept as sent (nothing pruned), and the LLM dashboard whole with its label."""
    ours = {(kind, ns, name) for _, kind, ns, name in objs}
    wanted = {
        ("PodMonitor", NS, observability.HEAD_MONITOR),
        ("PodMonitor", NS, observability.WORKER_MONITOR),
        ("PrometheusRule", NS, observability.RULE_NAME),
        ("ConfigMap", NS, "dashboard-ray-serve-llm"),
    }
    checks.expect(wanted <= ours, "state holds the PodMonitors, the PrometheusRule and the dashboards", str(ours))
    resources = stack.stack.export_stack().deployment.get("resources", [])
    for r in resources:
        kind = (r.get("inputs") or {}).get("kind")
        if kind in ("PodMonitor", "PrometheusRule"):
            meta = r["inputs"]["metadata"]
            live = api.get(object_path(r["inputs"]["apiVersion"], kind, meta["namespace"], meta["name"]))
            unkept = unkept_fields(r["inputs"]["spec"], live["spec"])
            checks.expect(not unkept, f"the API server kept {kind} {meta['name']} as sent", str(unkept[:5]))
    llm = api.get(object_path("v1", "ConfigMap", NS, "dashboard-ray-serve-llm"))
    panels = json.loads(llm["data"]["ray-serve-llm.json"])["panels"]
    checks.expect(
        llm["metadata"]["labels"] == observability.DASHBOARD_LABEL and any("NIXL" in p["title"] for p in panels),
        "the LLM dashboard's ConfigMap keeps the sidecar's label and its NIXL panels",
    )


def interrupted_up(stack: Stack, api: KubeClient, cfg: dict, kubeconfig: str, svc: str, expected: list, timeline,
                   checks: Checks) -> None:  # fmt: skip
    """On the emptied stack: `pulumi up` killed while it creates the RayService, then `pulumi up` again (the
    recovery docs/operations.md names), then the state must hold what an uninterrupted up made (`expected`:
    its Kubernetes objects), the API server one RayService and one RayCluster, and a refresh find no drift."""
    path = object_path("ray.io/v1", "RayService", NS, svc)
    waiting = {**cfg, "ray-llm-eks:waitForReady": True}  # the create then waits for a Ready that never comes
    stack.configure(waiting, kubeconfig)
    outcome = kill_up_while_creating(stack, api, path, timeline.log)
    checks.expect(bool(outcome["killed"]) and "not interrupted" not in outcome["result"],
                  "pulumi up killed while it creates the RayService", str(outcome)[:300])  # fmt: skip
    pending = pending_operations(stack)
    timeline.log(f"interrupted up: pending operations in the state: {pending}")
    checks.expect(any(RAY_SERVICE in p for p in pending), "the state records the RayService's create as pending",
                  str(pending))  # fmt: skip
    stack.configure(cfg, kubeconfig)
    try:  # the killed CLI left its lock (the file backend's lock file; Pulumi Cloud holds the update open)
        stack.up("at once after the interrupted up")
        locked = "no error"
    except Exception as exc:  # the Automation API's ConcurrentUpdateError
        locked = str(exc)
    checks.expect("currently locked" in locked and "pulumi cancel" in locked,
                  "the next up refuses: the stack is locked, the CLI names `pulumi cancel`", locked[-300:])  # fmt: skip
    stack.stack.cancel()  # the recovery's first step (docs/operations.md)
    res = stack.up("again after pulumi cancel")
    checks.expect(res.summary.result == "succeeded", "pulumi up after pulumi cancel succeeds")
    left = pending_operations(stack)
    timeline.log(f"after the second up: pending operations {left}")
    if left:  # the recovery's second step (docs/operations.md): clear what the new up already recorded
        stack.stack.refresh(clear_pending_creates=True, color="never")
        left = pending_operations(stack)
    checks.expect(not left, "no pending operation is left", str(left))
    objs = state_kubernetes_objects(stack.stack)
    checks.expect(sorted(map(str, objs)) == sorted(map(str, expected)),
                  "the state holds the same Kubernetes objects as after an uninterrupted up",
                  f"{sorted(set(map(str, objs)) ^ set(map(str, expected)))}")  # fmt: skip
    services = api.get("/apis/ray.io/v1/rayservices")["items"]
    clusters = api.get(f"/apis/ray.io/v1/namespaces/{NS}/rayclusters")["items"]
    names = [o["metadata"]["name"] for o in services + clusters]
    checks.expect(len(services) == 1 and len(clusters) == 1,
                  "nothing orphaned or doubled: one RayService, one RayCluster", str(names))  # fmt: skip
    drift = stack.stack.preview_refresh(color="never").change_summary
    checks.expect(set(drift) <= {"same"}, "pulumi refresh finds no drift", str(drift))
    res = stack.destroy()
    checks.expect(res.summary.result == "succeeded" and wait_for_gone(api, f"/api/v1/namespaces/{NS}", 60),
                  "destroy after the recovery leaves nothing")  # fmt: skip


def negative_cases(api: KubeClient, settings, nodes: dict, timeline: Timeline, checks: Checks) -> None:
    """Apply, straight to the API, our own RayService with one worker group broken, and check that
    the same scheduling check as above fails naming the pod and the scheduler's reason."""
    ns = "e2e-negative"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(
        "default ServiceAccount in e2e-negative",
        lambda: api.get_or_none(f"/api/v1/namespaces/{ns}/serviceaccounts/default"),
        60,
    )
    base = ray_service_spec(settings)
    pool = next(iter(settings.gpu_pools))
    node = next(n for n, labels in nodes.items() if labels.get(POOL_NODE_LABEL) == pool)
    alloc_mib = (
        cluster_checks.parse_quantity(api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["memory"]) / 2**20
    )
    cases = {
        "as-rendered": (lambda g: None, None),  # control: our own spec schedules, so the check can pass
        "neg-selector": (lambda g: g["template"]["spec"]["nodeSelector"].update({POOL_NODE_LABEL: "nowhere"}),
                         "didn't match Pod's node affinity/selector"),
        "neg-memory": (lambda g: [c["resources"][k].update(memory=f"{int(alloc_mib) + 1024}Mi")
                                  for c in g["template"]["spec"]["containers"] for k in ("requests", "limits")],
                       "Insufficient memory"),
    }  # fmt: skip
    for name, (breaks, reason) in cases.items():
        spec = copy.deepcopy(base)
        group = next(g for g in spec["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == pool)
        breaks(group)
        mismatches = cluster_checks.check_nodes(
            list(api.get("/api/v1/nodes")["items"]),
            spec["rayClusterConfig"]["headGroupSpec"],
            {g["groupName"]: g for g in spec["rayClusterConfig"]["workerGroupSpecs"]},
            settings.gpu_pools,
        )
        if reason is None:
            checks.expect(not mismatches, f"{name}: deploy-time check finds nothing", str(mismatches))
        else:
            checks.expect(
                any(m.startswith(f"pool {pool}: ") for m in mismatches),
                f"{name}: deploy-time check names pool {pool}",
                str(mismatches),
            )
        body = {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
        api.request("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayservices", body)
        workers = {r: p.nodes.desired_size for r, p in settings.gpu_pools.items()}
        _, _, problems = wait_scheduled(api, ns, name, workers, nodes, 120)
        if reason is None:
            checks.expect(not problems, f"{name}: head on the system pool, workers on their pools", "; ".join(problems))
        else:
            bad = [p for p in problems if "Unschedulable" in p and reason in p]
            checks.expect(
                bool(bad), f"{name}: the scheduling check fails naming the pod and '{reason}'", "; ".join(problems)
            )
            if bad:
                timeline.log(f"  {bad[0][:300]}")
        api.request("DELETE", f"/apis/ray.io/v1/namespaces/{ns}/rayservices/{name}")
        checks.expect(wait_for_gone(api, f"/apis/ray.io/v1/namespaces/{ns}/rayservices/{name}", 60),
                      f"{name}: the operator removed its finalizer on delete")  # fmt: skip
    api.request("DELETE", f"/api/v1/namespaces/{ns}")
    checks.expect(wait_for_gone(api, f"/api/v1/namespaces/{ns}", 90), "e2e-negative namespace is gone")


def main() -> int:
    timeline = Timeline()
    checks = Checks(timeline)
    keep = os.environ.get("E2E_KEEP_WORKDIR") == "1"
    work = Path(tempfile.mkdtemp(prefix="ray-llm-eks-e2e-"))
    timeline.log(f"work dir {work}")
    # A SIGTERM (CI cancelling the job) unwinds like an error, so the finally blocks stop what we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        run(
            work,
            timeline,
            checks,
            cluster_only="--cluster-only" in sys.argv,
            yaml_only="--yaml-only" in sys.argv,
            karpenter_only="--karpenter-only" in sys.argv,
        )
    except Exception:
        checks.fail("e2e run raised:\n" + traceback.format_exc())
    finally:
        timeline.print()
        if checks.failed:
            print(f"\nlogs: {work}/cluster/logs (kept)")
        elif not keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    print("\n== failed" if checks.failed else "")
    for f in checks.failed:
        print(f"  - {f}")
    print(f"e2e: {len(checks.passed)} passed, {len(checks.failed)} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
