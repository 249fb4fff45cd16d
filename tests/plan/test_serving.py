"""The Kubernetes half: device plugins, KubeRay, and the RayService, checked against the KubeRay
v1.7.0 CRD, Ray's own schemas, vLLM's argument names and the GPU nodes they must land on."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from adapters.stackfile import ROOT, SecretValue
from domain import aws_facts, config_keys, observability, versions
from domain.errors import ConfigError
from domain.facts import POOL_NODE_LABEL
from domain.placement import LOCAL_NVME_ROOT
from domain.ray_service import MODEL_CACHE_HOST_PATH
from domain.serve_config import role_resource
from domain.sizing import NODE_DAEMONSETS, Resources, allocatable, gpu_node_daemonsets, system_node_room, total
from e2e.checks import max_model_lens
from offline.plan import Plan, run_program
from tests.conftest import STACKS, failing_run, region_overrides

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
    from domain.serve_config import llm_configs_by_role

    return llm_configs_by_role(serve_doc(plan), plan.stack)


def ray_checkable(config: dict) -> dict:
    """An LLM config as Ray's LLMConfig can check it in this venv: RequestRouterConfig imports the router
    class, and `ray.serve.llm` needs vLLM, so the public prefix-affinity path becomes the internal class it
    subclasses (Ray 2.58 ray/serve/llm/request_router.py). The rehearsal venv checks the real path."""
    from domain import routing

    config = json.loads(json.dumps(config))
    router = config.get("deployment_config", {}).get("request_router_config")
    if router and router["request_router_class"] == routing.PREFIX_AFFINITY_CLASS:
        router["request_router_class"] = routing.PREFIX_AFFINITY_INTERNAL
    return config


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
        "aws-load-balancer-controller",  # components/load_balancer.py
        "kube-prometheus-stack",  # components/observability.py
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
    assert serve_doc(dev)["applications"][0]["import_path"] == "ray.serve.llm:build_pd_openai_app"
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


def test_cpu_kv_buffer_is_refused_for_hybrid_models_and_allowed_otherwise():
    error, monitor = failing_run({NS + "kvBufferDevice": "cpu"})
    assert isinstance(error, ConfigError) and monitor.registrations == []
    assert str(error).startswith("invalid config ray-llm-eks:kvBufferDevice = 'cpu': cuda for a hybrid")
    assert "[conv, ssm]" in str(error)
    llama = {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct", NS + "hfToken": SecretValue("t")}
    for config in llm_configs(run_program("dev", {**llama, NS + "kvBufferDevice": "cpu"})).values():
        assert config["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] == "cpu"


def test_family_settings_follow_the_model_not_the_file():
    """Switching dev to Llama drops every Qwen3.5 setting instead of carrying it over."""
    llama = {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct", NS + "hfToken": SecretValue("t")}
    for config in llm_configs(run_program("dev", llama)).values():
        engine = config["engine_kwargs"]
        assert not {"language_model_only", "reasoning_parser", "default_chat_template_kwargs"} & set(engine)
        assert "runtime_env" not in config


def test_a_serve_file_may_not_carry_family_settings(monkeypatch):
    from domain import serve_config

    doc = _pd_file()
    doc["applications"][0]["args"]["decode_config"]["engine_kwargs"]["language_model_only"] = True
    monkeypatch.setattr(serve_config, "load_serve_file", lambda name: doc)
    error, monitor = failing_run({})
    assert "decode engine_kwargs.language_model_only" in str(error) and "model table" in str(error)
    assert monitor.registrations == []


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
            beside = total({**NODE_DAEMONSETS, **gpu_node_daemonsets(with_efa, observability.gpu_daemonsets(EMBEDDED))})
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
    # With the embedded monitoring (domain/observability.py system_pods): Prometheus 200m/1024Mi + its
    # reloader 10m/50Mi, operator 100m/100Mi, kube-state-metrics 10m/190Mi, node-exporter 102m/180Mi,
    # Alertmanager 4m/100Mi + reloader 10m/50Mi, Grafana 100m/100Mi + 2 sidecars 50m/50Mi, EBS CSI
    # controller 70m/280Mi and node 30m/120Mi: 736m / 2294Mi more, still one m7i.xlarge.
    with_monitoring, _ = system_node_room(aws_facts.INSTANCE_SPECS["m7i.xlarge"], observability.system_pods(EMBEDDED))
    assert with_monitoring == Resources(3025 + 736, 9956 + 2294)
    assert with_monitoring.fits_in(offered)
    error, monitor = failing_run({NS + "systemNodes": {"instanceType": "m7i.large"}})
    assert "systemNodes.instanceType = 'm7i.large'" in str(error) and "room for the Ray head" in str(error)
    assert monitor.registrations == []


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


def test_workers_are_privileged_by_default_and_can_opt_out(dev):
    group = manifest(dev)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    plan = run_program("dev", {NS + "privilegedWorkers": False})
    group = manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


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


def test_serve_only_change_is_not_a_cluster_change(dev):
    """A different max_model_len changes serveConfigV2 only: applied in place, no replacement."""
    other = run_program("dev", {NS + "maxModelLen": 2048})
    before, after = dev.one(RAY_SERVICE).inputs["spec"], other.one(RAY_SERVICE).inputs["spec"]
    assert before["rayClusterConfig"] == after["rayClusterConfig"]
    assert max_model_lens(before["serveConfigV2"]) == {"prefill": 4096, "decode": 4096}
    assert max_model_lens(after["serveConfigV2"]) == {"prefill": 2048, "decode": 2048}


def test_rayservice_depends_on_operator_plugins_and_all_pools(plans):
    for plan in plans.values():
        service = plan.one(RAY_SERVICE).urn
        for release in plan.of_type(RELEASE):
            if release.name in ("kube-prometheus-stack", "dcgm-exporter"):
                continue  # watches the RayService; neither waits for the other (tests/unit/test_observability_plan.py)
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
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}
    # The head too: building the app reads a gated model's config from the hub.
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert token in group["template"]["spec"]["containers"][0]["env"]
    assert plan.depends_on(plan.one(RAY_SERVICE).urn, secret.urn)


def test_no_token_no_secret(dev):
    assert [s.name for s in dev.of_type("kubernetes:core/v1:Secret")] == ["llm-api-keys"]  # domain/api_keys.py
    head = manifest(dev)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in head["env"])  # only where Grafana is


def test_efa_workers_use_libfabric_without_huge_pages(plans):
    for plan in plans.values():
        for group in manifest(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            container = group["template"]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            efa = "vpc.amazonaws.com/efa" in container["resources"]["requests"]
            assert ("FI_PROVIDER" in env) == efa, group["groupName"]
            if efa:  # huge pages off rather than a hugepages-2Mi request (see domain/ray_service.py)
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
    assert images == {"763104351884.dkr.ecr.us-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0.0"}
    assert spec["rayVersion"] == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].ray


def test_dlc_registry_account_follows_the_region():
    plan = run_program("dev", region_overrides("af-south-1"))
    spec = manifest(plan)["spec"]["rayClusterConfig"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "626614931356.dkr.ecr.af-south-1.amazonaws.com/ray:"
    )


def test_dev_requirements_pin_the_images_ray():
    import ray

    assert ray.__version__ == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].ray


def test_vllm_argument_list_is_for_the_images_vllm():
    data = json.loads((ROOT / "domain" / "data" / "vllm_engine_args.json").read_text())
    assert data["vllm_version"] == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].vllm
    assert "vllm" in data["source"] and len(data["engine_args"]) > 100
    assert {"max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "kv_transfer_config"} <= set(
        data["engine_args"]
    )


SERVING_INVALID = {
    "unknown serve config": ({NS + "serveConfig": "pd"}, "serveConfig", "serve_configs/"),
    "region without DLC registry": (
        region_overrides("us-gov-west-1"),
        "aws:region",
        "Deep Learning Containers",
    ),
    "image without rayVersion": ({NS + "image": "example.com/ray:2.58.0-custom"}, "rayVersion", "together"),
    "floating image tag": (
        {NS + "image": "example.com/ray:latest", NS + "rayVersion": "2.58.0"},
        "image",
        "exact tag",
    ),
    "unknown DLC tag": ({NS + "dlcImageTag": "serve-llm-cuda"}, "dlcImageTag", "Ray version we know"),
    "service name too long": ({NS + "serviceName": "x" * 48}, "serviceName", "47"),
    "replicas beyond the pool": ({NS + "replicas": {"prefill": 2}}, "replicas.prefill", "at most 1"),
    "replicas for an unknown role": ({NS + "replicas": {"prefil": 1}}, "replicas.prefil", "pool role"),
    "pools that do not match the app": (
        {NS + "serveConfig": "collocated"},
        "gpuPools",
        "exactly the pools",
    ),
    "chart version not exact": ({NS + "kuberayVersion": "1.7"}, "kuberayVersion", "exact version"),
}


@pytest.mark.parametrize("case", sorted(SERVING_INVALID))
def test_invalid_serving_value_fails_before_any_resource(case):
    overrides, key, rule = SERVING_INVALID[case]
    error, monitor = failing_run(overrides)
    assert isinstance(error, ConfigError) and key in str(error) and rule in str(error), str(error)
    assert monitor.registrations == []


# ---- The serve files themselves


def _pd_file() -> dict:
    return yaml.safe_load((ROOT / "serve_configs" / "pd-disaggregated.yaml").read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "serve_configs").glob("*.yaml")))
def test_every_serve_file_passes_ray_and_our_checks(name):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    from domain.serve_config import check_application, llm_configs_by_role

    doc = yaml.safe_load((ROOT / "serve_configs" / f"{name}.yaml").read_text())
    ServeDeploySchema.model_validate(doc)
    check_application(doc, name, "0.26.0")
    for config in llm_configs_by_role(doc, name).values():
        LLMConfig.model_validate(config)


def _breaks(mutate) -> str:
    from domain.serve_config import check_application

    doc = _pd_file()
    mutate(doc["applications"][0]["args"])
    with pytest.raises(ConfigError) as caught:
        check_application(doc, "pd", "0.26.0")
    return str(caught.value)


def test_engine_argument_typo_is_caught_here_not_on_a_gpu():
    def typo(args):
        args["decode_config"]["engine_kwargs"]["max_model_length"] = 4096

    assert "decode engine_kwargs.max_model_length" in _breaks(typo)


def test_kv_transfer_field_typo_is_caught():
    def typo(args):
        args["prefill_config"]["engine_kwargs"]["kv_transfer_config"]["kv_buffer_devices"] = "cpu"

    assert "kv_transfer_config.kv_buffer_devices" in _breaks(typo)


def test_pd_rules_of_pdservingargs():
    def other_model(args):
        args["decode_config"]["model_loading_config"]["model_id"] = "other/model"

    def no_kv(args):
        del args["prefill_config"]["engine_kwargs"]["kv_transfer_config"]

    def unknown_arg(args):
        args["proxy_cls_config"] = {}

    def no_decode(args):
        del args["decode_config"]

    assert "the same model_id" in _breaks(other_model)
    assert "required on both PD sides" in _breaks(no_kv)
    assert "args.proxy_cls_config" in _breaks(unknown_arg)
    assert "args.decode_config" in _breaks(no_decode)


def test_stack_overrides_reach_the_rendered_config():
    plan = run_program(
        "dev",
        {
            NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct",
            NS + "maxModelLen": 8192,
            NS + "hfToken": SecretValue("t"),
        },
    )
    for config in llm_configs(plan).values():
        assert config["model_loading_config"] == {
            "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "model_source": "meta-llama/Llama-3.1-8B-Instruct",
        }
        assert config["engine_kwargs"]["max_model_len"] == 8192


def test_baseline_stack_runs_the_collocated_app(plans):
    plan = plans["baseline"]
    assert serve_doc(plan)["applications"][0]["import_path"] == "ray.serve.llm:build_openai_app"
    assert set(llm_configs(plan)) == {"collocated"}
    (group,) = [g for g in plan.of_type(MNG) if g.name != "eks-system"]
    assert group.inputs["labels"][POOL_NODE_LABEL] == "collocated"
    assert group.inputs["enableEfaSupport"] is False and "placementGroupAvailabilityZone" not in group.inputs


def test_serve_files_are_plain_data():
    files = sorted(p.name for p in (ROOT / "serve_configs").iterdir())
    assert files == [
        "collocated.yaml",
        "data-parallel.yaml",
        "pd-disaggregated.yaml",
        "pd-xpyd.yaml",
        "tensor-parallel.yaml",
    ]
    for name in files:
        assert Path(ROOT / "serve_configs" / name).read_text().count("import_path") == 1


def efa_release(plan: Plan):
    return plan.one(RELEASE, "aws-efa-k8s-device-plugin")


@pytest.mark.parametrize(
    ("region", "repository"),
    [
        ("us-east-1", "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"),
        ("ap-east-1", "800184023465.dkr.ecr.ap-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"),
        ("cn-northwest-1", "961992271922.dkr.ecr.cn-northwest-1.amazonaws.com.cn/eks/aws-efa-k8s-device-plugin"),
    ],
)
def test_efa_plugin_image_comes_from_the_regions_registry(region, repository):
    plan = run_program("dev", region_overrides(region))
    assert efa_release(plan).inputs["values"]["image"] == {"repository": repository}


def test_region_without_an_eks_addon_registry_is_refused_naming_it(monkeypatch):
    monkeypatch.delitem(aws_facts.EKS_ADDON_REGISTRY_ACCOUNTS, "eu-west-1")
    error, monitor = failing_run(region_overrides("eu-west-1"))
    assert "aws:region = 'eu-west-1'" in str(error) and "EKS add-on image registry" in str(error)
    assert monitor.registrations == []
    run_program("baseline", region_overrides("eu-west-1"))  # no EFA pool: no EFA plugin to pull


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
    assert "aws:region = 'cn-north-1'" in str(error) and "EC2 service principal" in str(error)


def test_tensor_parallel_wider_than_the_node_names_the_gpus_per_node(monkeypatch):
    """Not "replicas.prefill = 1: at most 0": the cause is the instance's GPU count."""
    from domain import serve_config

    doc = _pd_file()
    doc["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["tensor_parallel_size"] = 2
    monkeypatch.setattr(serve_config, "load_serve_file", lambda name: doc)
    error, monitor = failing_run({})
    assert str(error) == (
        "invalid config ray-llm-eks:gpuPools.prefill.instanceType = 'g6.8xlarge': an instance with >= 2 GPUs for "
        "tensor_parallel_size 2 (prefill); g6.8xlarge has 1 (tensor parallelism does not cross nodes here)"
    )
    assert monitor.registrations == []
