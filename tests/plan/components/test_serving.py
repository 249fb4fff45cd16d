"""The Kubernetes half as the program declares it: device plugins, KubeRay, and the RayService, checked
against the KubeRay v1.7.0 CRD, Ray's own schemas and the GPU nodes they must land on. The serving
rules called directly: tests/unit/domain/serving/test_serving_rules.py."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from offline.plan import Plan, run_program
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.platform import aws_facts, versions
from ray_llm_eks.domain.platform.placement import LOCAL_NVME_ROOT
from ray_llm_eks.domain.platform.sizing import (
    NODE_DAEMONSETS,
    Resources,
    allocatable,
    gpu_node_daemonsets,
    system_node_room,
    total,
)
from ray_llm_eks.domain.render.ray_service import MODEL_CACHE_HOST_PATH
from ray_llm_eks.domain.serving import api_keys
from ray_llm_eks.domain.serving.serve_config import role_resource
from ray_llm_eks.domain.telemetry import monitoring_release, observability
from tests.conftest import ROOT, STACKS, failing_run, region_overrides

EMBEDDED = observability.ObservabilitySettings("embedded")

RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
RELEASE = "kubernetes:helm.sh/v3:Release"
MNG = "eks:index:ManagedNodeGroup"
CRD = ROOT / "offline" / "schemas" / "ray.io_rayservices.v1.7.0.yaml"
NS = "ray-llm-eks:"


@pytest.fixture(scope="module")
def rayservice_schema() -> jsonschema.Draft7Validator:
    """The CRD's openAPIV3Schema as a validator (OpenAPI v3 schemas are JSON Schema draft-4/7-like;
    x-kubernetes-* extensions are ignored by jsonschema)."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(v1["schema"]["openAPIV3Schema"])


def manifest(plan: Plan) -> dict:
    return next(doc for doc in plan.manifests().values() if doc.get("kind") == "RayService")


def serve_doc(plan: Plan) -> dict:
    return yaml.safe_load(manifest(plan)["spec"]["serveConfigV2"])


def llm_configs(plan: Plan) -> dict[str, dict]:
    from ray_llm_eks.domain.serving.fields import to_dict
    from ray_llm_eks.domain.serving.serve_app import parse_document

    return {role: to_dict(config) for role, config in parse_document(serve_doc(plan), plan.stack).roles.items()}


def ray_checkable(config: dict) -> dict:
    """An LLM config as Ray's LLMConfig can check it in this venv: RequestRouterConfig imports the router
    class, and `ray.serve.llm` needs vLLM, so the public prefix-affinity path becomes the internal class it
    subclasses (Ray 2.58 ray/serve/llm/request_router.py); the stack's server class (the pods' shipped code, which
    needs vLLM) becomes one this venv imports (RAYS_SERVER). The rehearsal venv checks the real paths."""
    from ray_llm_eks.domain.serving import routing, serve_app

    config = json.loads(json.dumps(config))
    router = config.get("deployment_config", {}).get("request_router_config")
    if router and router["request_router_class"] == routing.PREFIX_AFFINITY_CLASS:
        router["request_router_class"] = routing.PREFIX_AFFINITY_INTERNAL
    if config.get("server_cls") == serve_app.FIRST_CHUNK_SERVER:
        config["server_cls"] = RAYS_SERVER
    return config


# Ray's validator imports a server_cls string (llm_config.py validate_server_cls), and first_chunk.LLMServer needs
# vLLM, which this venv lacks: a class it can import stands in (the check is of the field, not of the class).
RAYS_SERVER = "builtins:object"


def pool_of(plan: Plan, role: str):
    """The GPU managed node group a role's workers must land on."""
    return next(g for g in plan.of_type(MNG) if g.inputs.get("labels", {}).get(POOL_NODE_LABEL) == role)


# ---- Helm releases


def test_dev_has_the_three_releases_pinned(dev):
    releases = {r.name: r.inputs for r in dev.of_type(RELEASE)}
    assert set(releases) == {
        "kuberay-operator",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "aws-load-balancer-controller",  # ray_llm_eks/components/load_balancer.py
        "kube-prometheus-stack",  # ray_llm_eks/components/observability.py
        "dcgm-exporter",
    }
    kuberay = releases["kuberay-operator"]
    assert kuberay["chart"] == "kuberay-operator" and kuberay["version"].startswith("1.7.")
    assert kuberay["repositoryOpts"]["repo"] == "https://ray-project.github.io/kuberay-helm/"
    assert kuberay["namespace"] == "kuberay-system"
    assert kuberay["values"]["nodeSelector"] == {POOL_NODE_LABEL: "system"}
    nvidia = releases["nvidia-device-plugin"]
    assert nvidia["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"
    assert releases["aws-efa-k8s-device-plugin"]["repositoryOpts"]["repo"] == "https://aws.github.io/eks-charts"
    for release in releases.values():
        assert release["version"] and release["version"] != "latest"


@pytest.mark.parametrize("plugin", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_device_plugins_run_only_on_gpu_nodes_and_tolerate_the_taint(dev, plugin):
    values = dev.one(RELEASE, plugin).inputs["values"]
    for group in (g for g in dev.of_type(MNG) if g.inputs.get("taints")):
        labels = group.inputs["labels"]
        assert all(labels.get(k) == v for k, v in values["nodeSelector"].items())
        for taint in group.inputs["taints"]:
            assert any(
                t["key"] == taint["key"] and t["operator"] == "Exists" and t["effect"] == "NoSchedule"
                for t in values["tolerations"]
            )
    system = dev.one(MNG, "eks-system").inputs["labels"]
    assert not all(system.get(k) == v for k, v in values["nodeSelector"].items())


def test_efa_plugin_allow_list_covers_every_efa_pool_type(plans):
    for plan in plans.values():
        efa_types = {g.inputs["instanceTypes"][0] for g in plan.of_type(MNG) if g.inputs.get("enableEfaSupport")}
        releases = {r.name: r for r in plan.of_type(RELEASE)}
        if not efa_types:
            assert "aws-efa-k8s-device-plugin" not in releases
            continue
        labels = releases["aws-efa-k8s-device-plugin"].inputs["values"]["supportedInstanceLabels"]
        assert labels["keys"] == ["node.kubernetes.io/instance-type"]
        assert efa_types <= set(labels["values"])


def test_releases_wait_for_and_outlive_the_system_pool(plans):
    for plan in plans.values():
        system = plan.one(MNG, "eks-system").urn
        for release in plan.of_type(RELEASE):
            assert plan.depends_on(release.urn, system), release.name
            assert release.provider and "pulumi:providers:kubernetes" in release.provider


# ---- The RayService


@pytest.mark.parametrize("stack", STACKS)
def test_rayservice_validates_against_the_kuberay_crd(plans, rayservice_schema, stack):
    doc = manifest(plans[stack])
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayService"
    rayservice_schema.validate(doc)
    assert len(doc["metadata"]["name"]) <= 47


def test_the_crd_check_can_fail(dev, rayservice_schema):
    doc = manifest(dev)
    broken = json.loads(json.dumps(doc))
    broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        rayservice_schema.validate(broken)


@pytest.mark.parametrize("stack", STACKS)
def test_serve_config_passes_rays_own_schemas(plans, stack):
    from ray.llm._internal.common.placement import PlacementGroupConfig
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    doc = serve_doc(plans[stack])
    ServeDeploySchema.model_validate(doc)
    for config in llm_configs(plans[stack]).values():
        llm = LLMConfig.model_validate(ray_checkable(config))
        PlacementGroupConfig.model_validate(llm.placement_group_config)
        assert llm.accelerator_type == "L4"


def test_ray_rejects_what_we_would_otherwise_ship(dev):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    config = dict(llm_configs(dev)["prefill"], max_model_length=4096)
    with pytest.raises(ValueError, match="max_model_length"):
        LLMConfig.model_validate(config)


def test_pd_app_shape(dev):
    configs = llm_configs(dev)
    # Ray's PD builder, its decode servers behind the prefill guard (ray_llm_eks/serve_ingress/prefill_guard.py).
    assert serve_doc(dev)["applications"][0]["import_path"] == "prefill_guard:build_pd_app"
    assert {c["model_loading_config"]["model_id"] for c in configs.values()} == {"Qwen/Qwen3.5-9B"}
    for role, config in configs.items():
        kv = config["engine_kwargs"]["kv_transfer_config"]
        assert kv["kv_connector"] == "NixlConnector"
        assert kv["kv_connector_extra_config"]["backends"] == ["LIBFABRIC"]
        assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
        assert kv["kv_buffer_device"] == "cuda", "GPU memory registered with EFA, as the reference runs g6"
        engine = config["engine_kwargs"]
        assert engine["max_model_len"] == 4096
        # Qwen3.5's family settings, from the model table: text only, answers without thinking text.
        assert engine["language_model_only"] is True and engine["reasoning_parser"] == "qwen3"
        assert engine["default_chat_template_kwargs"] == {"enable_thinking": False}
        assert config["runtime_env"]["env_vars"]["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"


def test_the_shipped_code_carries_every_module_whatever_the_served_app():
    """LlmService ships every module, selective PD's decode server too where the app does not run it: turning
    selectivePd on changes the serve config alone, and the pods have its code already (api_keys.SHIPPED_MODULES)."""
    dev, selective = run_program("dev"), run_program("dev", {NS + "selectivePd": "1024"})
    for plan in (dev, selective):
        data = plan.one("kubernetes:core/v1:ConfigMap", "llm-api-key-ingress").inputs["data"]
        assert set(data) == set(api_keys.SHIPPED_MODULES)
        assert data["selective_pd.py"] == (ROOT / "ray_llm_eks" / "serve_ingress" / "selective_pd.py").read_text()


def test_every_llm_deployment_maps_to_exactly_one_worker_group(plans):
    """Each LLM config's bundles ask for one pool's resource that exactly one worker group offers,
    so Ray can never place a prefill replica on a decode node."""
    for plan in plans.values():
        groups = manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        for role, config in llm_configs(plan).items():
            bundle = config["placement_group_config"]["bundle_per_worker"]
            custom = {k for k in bundle if k not in ("GPU", "CPU") and not k.startswith("accelerator_type")}
            assert custom == {role_resource(role)}
            offering = [g for g in groups if custom <= set(g.get("resources", {}))]
            assert [g["groupName"] for g in offering] == [role]


def test_worker_groups_land_only_on_their_own_pool(plans):
    for plan in plans.values():
        groups = manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        mngs = [g for g in plan.of_type(MNG) if g.inputs.get("taints")]
        for group in groups:
            pod = group["template"]["spec"]
            matches = [m for m in mngs if all(m.inputs["labels"].get(k) == v for k, v in pod["nodeSelector"].items())]
            assert [m.inputs["labels"][POOL_NODE_LABEL] for m in matches] == [group["groupName"]]
            for taint in matches[0].inputs["taints"]:
                assert {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": "NoSchedule"} in (
                    pod["tolerations"]
                )
            pool = matches[0].inputs["scalingConfig"]
            assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (
                pool["minSize"],
                pool["desiredSize"],
                pool["maxSize"],
            )


def _quantity_mib(value: str) -> int:
    return int(value.removesuffix("Mi")) if value.endswith("Mi") else int(value.removesuffix("Gi")) * 1024


def test_workers_fit_their_instance(plans):
    """Worker requests + DaemonSets fit what kubelet leaves allocatable on the instance."""
    for plan in plans.values():
        for group in manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            mng = pool_of(plan, group["groupName"])
            spec = aws_facts.INSTANCE_SPECS[mng.inputs["instanceTypes"][0]]
            (container,) = group["template"]["spec"]["containers"]
            requests = container["resources"]["requests"]
            assert requests == container["resources"]["limits"]
            asked = Resources(int(requests["cpu"].removesuffix("m")), _quantity_mib(requests["memory"]))
            with_efa = any(g.inputs.get("enableEfaSupport") for g in plan.of_type(MNG))
            # every shipped stack runs the embedded monitoring: node-exporter and the DCGM exporter too
            beside = total(
                {**NODE_DAEMONSETS, **gpu_node_daemonsets(with_efa, monitoring_release.gpu_daemonsets(EMBEDDED))}
            )
            assert Resources(asked.cpu_m + beside.cpu_m, asked.memory_mib + beside.memory_mib).fits_in(
                allocatable(spec)
            )
            assert int(requests["nvidia.com/gpu"]) == spec.gpus
            if mng.inputs.get("enableEfaSupport"):
                assert int(requests["vpc.amazonaws.com/efa"]) == spec.network_cards
            assert group["resources"] == {role_resource(group["groupName"]): str(spec.gpus)}


def test_g6_8xlarge_worker_size_is_the_arithmetic(dev):
    """g6.8xlarge: 32 vCPU / 128 GiB, of which kubelet sees 92.5% (7.5% VM overhead, as Karpenter);
    kube-reserved 150m / 2829Mi (11*234+255); eviction 100Mi; aws-node 25m, kube-proxy 100m,
    NVIDIA plugin 50m/64Mi, EFA plugin 10m/20Mi, node-exporter 102m/180Mi, DCGM exporter 100m/128Mi;
    rounded down to whole CPUs and GiB."""
    group = manifest(dev)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    (container,) = group["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "31000m"  # 32000-150-25-100-50-10-102-100 = 31463
    assert container["resources"]["requests"]["memory"] == "117760Mi"  # 121241-2829-100-64-20-180-128 = 117920
    shm = next(v for v in group["template"]["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["sizeLimit"] == "29440Mi"  # a quarter
    assert int(group["rayStartParams"]["object-store-memory"]) == 117760 * 1024 * 1024 // 5 < 29440 * 1024 * 1024


def test_head_runs_on_the_system_node_and_fits_it(plans):
    for plan in plans.values():
        head = manifest(plan)["spec"]["rayClusterConfig"]["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0"
        assert head["template"]["spec"]["nodeSelector"] == plan.one(MNG, "eks-system").inputs["labels"]
        ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
        # + the autoscaler's and the dashboard's metrics ports, which the head's PodMonitor scrapes.
        assert ports == {
            "gcs-server": 6379,
            "dashboard": 8265,
            "client": 10001,
            "metrics": 8080,
            "serve": 8000,
            "as-metrics": 44217,
            "dash-metrics": 44227,
        }
    need, offered = system_node_room(aws_facts.INSTANCE_SPECS["m7i.xlarge"])
    # m7i.xlarge: 4000m - 80m kube-reserved; 16384 MiB x 92.5% - 893 (11*58+255) - 100 eviction.
    assert offered == Resources(3920, 14162)
    # aws-node 25m + kube-proxy 100m + CoreDNS 2 x (100m, 70Mi) + operator (100m, 512Mi) + head (2, 8Gi)
    # + the head's autoscaler sidecar (500m, 512Mi) + the Cluster Autoscaler (100m, 600Mi).
    assert need == Resources(3025, 9956)
    assert need.fits_in(offered)
    # With the embedded monitoring (ray_llm_eks/domain/telemetry/observability.py system_pods): Prometheus 200m/1024Mi +
    # its reloader 10m/50Mi, operator 100m/100Mi, kube-state-metrics 10m/190Mi, node-exporter 102m/180Mi,
    # Alertmanager 4m/100Mi + reloader 10m/50Mi, Grafana 100m/100Mi + 2 sidecars 50m/50Mi, EBS CSI
    # controller 70m/280Mi and node 30m/120Mi: 736m / 2294Mi more, still one m7i.xlarge.
    with_monitoring, _ = system_node_room(
        aws_facts.INSTANCE_SPECS["m7i.xlarge"], monitoring_release.system_pods(EMBEDDED)
    )
    assert with_monitoring == Resources(3025 + 736, 9956 + 2294)
    assert with_monitoring.fits_in(offered)


def test_model_cache_hostpath_mount_and_hf_home_agree(plans):
    for plan in plans.values():
        for group in manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            (container,) = pod["containers"]
            volume = next(v for v in pod["volumes"] if "hostPath" in v)
            mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
            env = {e["name"]: e.get("value") for e in container["env"]}
            for cache in ("HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"):  # all survive a pod restart
                assert env[cache].startswith(mount["mountPath"] + "/"), cache
            assert env["HF_XET_HIGH_PERFORMANCE"] == "1" and "HF_HUB_ENABLE_HF_TRANSFER" not in env
            assert volume["hostPath"]["path"] == MODEL_CACHE_HOST_PATH
            (init,) = pod["initContainers"]  # opens the root-owned hostPath to the image's user
            assert init["command"] == ["chmod", "1777", mount["mountPath"]]
            assert init["volumeMounts"] == [{"name": volume["name"], "mountPath": mount["mountPath"]}]
            assert init["resources"]["requests"] == init["resources"]["limits"], "keeps the pod Guaranteed"
            # No shell needed: KubeRay keeps a probe we set instead of injecting `bash -c "wget ..."`.
            assert container["readinessProbe"]["httpGet"] == {"path": "/-/healthz", "port": 8000}
            assert volume["hostPath"]["path"].startswith(LOCAL_NVME_ROOT + "/"), "must be on the RAID0 NVMe"
            shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
            assert shm["emptyDir"]["medium"] == "Memory"
            assert any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])


def test_upgrade_and_readiness_options(dev):
    service = dev.one(RAY_SERVICE)
    assert service.inputs["spec"]["upgradeStrategy"] == {"type": "None"}
    assert "spec.rayClusterConfig.headGroupSpec" in service.options["replaceOnChanges"]
    assert "spec.rayClusterConfig.workerGroupSpecs[*].template" in service.options["replaceOnChanges"]
    assert service.options["deleteBeforeReplace"] is True
    annotations = service.inputs["metadata"]["annotations"]
    assert annotations["pulumi.com/waitFor"] == "condition=Ready"
    assert int(annotations["pulumi.com/timeoutSeconds"]) >= 1800
    assert service.inputs["spec"]["rayClusterConfig"]["rayVersion"] == "2.58.0"


def test_rayservice_depends_on_operator_plugins_and_all_pools(plans):
    for plan in plans.values():
        service = plan.one(RAY_SERVICE).urn
        for release in plan.of_type(RELEASE):
            if release.name in ("kube-prometheus-stack", "dcgm-exporter"):
                continue  # watches the RayService; neither waits for the other
            assert plan.depends_on(service, release.urn), release.name
        for group in plan.of_type(MNG):
            assert plan.depends_on(service, group.urn), group.name
        assert "pulumi:providers:kubernetes" in plan.one(RAY_SERVICE).provider


def test_outputs(dev):
    out = dev.outputs
    assert out["openaiBaseUrl"] == "http://llm-serve-svc.llm.svc.cluster.local:8000/v1"
    assert out["portForwardCommand"] == "kubectl -n llm port-forward svc/llm-serve-svc 8000:8000"
    assert out["dashboardPortForwardCommand"] == "kubectl -n llm port-forward svc/llm-head-svc 8265:8265"
    assert "/v1/chat/completions" in out["curlExample"] and '"model": "Qwen/Qwen3.5-9B"' in out["curlExample"]


# ---- Secrets


def test_hf_token_never_appears_in_plain_text(tmp_path, capsys):
    canary = "hf_CANARY_do_not_leak_4b1d"
    plan = run_program("dev", {NS + "hfToken": SecretValue(canary)})
    plan.write(tmp_path)
    print(plan.summary())
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert canary not in written
    assert canary not in json.dumps(plan.resources_json()) + json.dumps(plan.outputs)
    assert canary not in "".join(capsys.readouterr())
    secret = plan.one("kubernetes:core/v1:Secret", "llm-hf-token")
    assert secret.inputs["stringData"] == "[secret]"
    (doc,) = [d for d in plan.manifests().values() if d.get("kind") == "Secret" and d["metadata"]["name"] == "hf-token"]
    assert doc["metadata"]["name"] == "hf-token" and doc["stringData"] == "[secret]"
    cluster = manifest(plan)["spec"]["rayClusterConfig"]
    # A file, never an environment variable (checkov CKV_K8S_35; Ray Serve LLM would copy HF_TOKEN into its
    # engines' runtime env, kept in the GCS). The head too: building the app reads a gated model's config from the hub.
    path = {"name": "HF_TOKEN_PATH", "value": "/etc/ray-llm-eks/hf-token/HF_TOKEN"}
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        container = pod["containers"][0]
        assert path in container["env"] and not any("secretKeyRef" in e.get("valueFrom", {}) for e in container["env"])
        assert {"name": "hf-token", "secret": {"secretName": "hf-token"}} in pod["volumes"]
        assert {"name": "hf-token", "mountPath": "/etc/ray-llm-eks/hf-token", "readOnly": True} in container[
            "volumeMounts"
        ]
    assert plan.depends_on(plan.one(RAY_SERVICE).urn, secret.urn)


def test_no_token_no_secret(dev):
    # The API keys (ray_llm_eks/domain/serving/api_keys.py) and Ray's token (ray_llm_eks/domain/security/ray_auth.py).
    assert sorted(s.name for s in dev.of_type("kubernetes:core/v1:Secret")) == ["llm-api-keys", "llm-ray-auth-token"]
    head = manifest(dev)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in head["env"])  # only where Grafana is


def test_efa_workers_use_libfabric_without_huge_pages(plans):
    for plan in plans.values():
        for group in manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            container = group["template"]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            efa = "vpc.amazonaws.com/efa" in container["resources"]["requests"]
            assert ("FI_PROVIDER" in env) == efa, group["groupName"]
            if efa:  # huge pages off rather than a hugepages-2Mi request (see ray_llm_eks/domain/render/ray_service.py)
                assert env["FI_EFA_USE_HUGE_PAGE"] == "0" and env["FI_EFA_USE_DEVICE_RDMA"] == "0"
                assert not any(k.startswith("hugepages-") for k in container["resources"]["requests"])


# ---- Image and versions


def test_image_and_ray_version_are_one_pair(dev):
    spec = manifest(dev)["spec"]["rayClusterConfig"]
    images = {
        c["image"]
        for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        for c in g["template"]["spec"]["containers"]
    }
    # By digest, the tag kept; offline the digest is the marked placeholder `pulumi up` fills from ECR.
    assert images == {
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0.0"
        "@<sha256 digest of the tag, looked up in the registry at deploy time>"
    }
    assert spec["rayVersion"] == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].ray


# ---- The serve files themselves


def test_baseline_stack_runs_the_collocated_app(plans):
    plan = plans["baseline"]
    assert serve_doc(plan)["applications"][0]["import_path"] == "ray.serve.llm:build_openai_app"
    assert set(llm_configs(plan)) == {"collocated"}
    (group,) = [g for g in plan.of_type(MNG) if g.name != "eks-system"]
    assert group.inputs["labels"][POOL_NODE_LABEL] == "collocated"
    assert group.inputs["enableEfaSupport"] is False and "placementGroupAvailabilityZone" not in group.inputs


def efa_release(plan: Plan):
    return plan.one(RELEASE, "aws-efa-k8s-device-plugin")


def test_node_role_trusts_ec2_amazonaws_com_in_every_partition(monkeypatch):
    own_image = {
        NS + "image": "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com/ray-llm:2.58.0",
        NS + "rayVersion": "2.58.0",
    }
    for region, extra in (("cn-north-1", {}), ("us-gov-west-1", own_image)):  # no DLC registry in GovCloud
        role = run_program("dev", {**region_overrides(region), **extra}).one("aws:iam/role:Role", "eks-node-role")
        principal = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"]
        assert principal == {"Service": "ec2.amazonaws.com"}, region  # not ec2.amazonaws.com.cn
    monkeypatch.delitem(aws_facts.EC2_SERVICE_PRINCIPAL, "aws-cn")
    error, _ = failing_run(region_overrides("cn-north-1"))
    assert "aws:region = cn-north-1" in str(error) and "EC2 service principal" in str(error)
