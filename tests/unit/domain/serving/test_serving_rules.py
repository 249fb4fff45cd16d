"""The serving rules called directly: the serve files against Ray's schemas and our PD and vLLM
checks, what a stack may change in the rendered application, the image and registries per region, and
the RayService the one builder renders. What the program declares with them: tests/plan/components/test_serving.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from e2e.checks import max_model_lens
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.platform import aws_facts, versions
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from ray_llm_eks.domain.serving.fields import put, to_dict
from ray_llm_eks.domain.serving.llm_config import RuntimeEnv
from ray_llm_eks.domain.serving.serve_config import check_backends, with_kv_transfer_env
from tests.conftest import ROOT, region_overrides, settings_error, settings_of

NS = "ray-llm-eks:"


def spec_of(overrides: dict | None = None) -> dict:
    """The RayService spec the one builder renders for dev with these values."""
    return ray_service_spec(settings_of(overrides))


def llm_configs(overrides: dict | None = None, stack: str = "dev") -> dict[str, dict]:
    return {role: to_dict(c) for role, c in settings_of(overrides, stack).serving.serve_document.roles.items()}


def test_head_needs_room_on_the_system_node():
    error = settings_error({NS + "systemNodes": {"instanceType": "m7i.large"}})
    assert "systemNodes.instanceType = m7i.large" in str(error) and "room for the Ray head" in str(error)


def test_cpu_kv_buffer_is_refused_for_hybrid_models_and_allowed_otherwise():
    error = settings_error({NS + "kvBufferDevice": "cpu"})
    assert isinstance(error, ConfigError)
    assert str(error).startswith("Pulumi.dev.yaml: invalid config ray-llm-eks:kvBufferDevice = cpu: cuda for a hybrid")
    assert "[conv, ssm]" in str(error)
    llama = {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct", NS + "hfToken": SecretValue("t")}
    for config in llm_configs({**llama, NS + "kvBufferDevice": "cpu"}).values():
        assert config["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] == "cpu"


def test_family_settings_follow_the_model_not_the_file():
    """Switching dev to Llama drops every Qwen3.5 setting instead of carrying it over."""
    llama = {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct", NS + "hfToken": SecretValue("t")}
    for config in llm_configs(llama).values():
        engine = config["engine_kwargs"]
        assert not {"language_model_only", "reasoning_parser", "default_chat_template_kwargs"} & set(engine)
        assert "runtime_env" not in config


def test_a_role_moving_gpu_kv_over_ucx_keeps_its_reads_on_cuda_ipc_gets():
    """Without it, UCX 1.21.0 turns cuda_ipc GETs off on GPUs without NVLink and vLLM's pull connector READs each
    request's KV through TCP, one after another (docs/measurements.md: 140 ms a 66 MiB READ instead of 0.9 ms)."""
    decode = settings_of({}).serving.serve_document.roles["decode"]
    transfer = decode.engine.kv_transfer_config

    def env_with(**changes) -> dict:
        config = put(decode, engine_kwargs=put(decode.engine, kv_transfer_config=put(transfer, **changes)))
        return dict((with_kv_transfer_env(config).runtime_env or {}).get("env_vars") or {})

    assert env_with(kv_connector_extra_config={"backends": ["UCX"]})["UCX_CUDA_IPC_ENABLE_GET_ZCOPY"] == "on"
    assert env_with(kv_connector_extra_config={})["UCX_CUDA_IPC_ENABLE_GET_ZCOPY"] == "on"  # NIXL's default is UCX
    # LIBFABRIC (the shipped EFA path) does not read it, and host-memory buffers have no CUDA IPC.
    assert "UCX_CUDA_IPC_ENABLE_GET_ZCOPY" not in env_with(kv_connector_extra_config={"backends": ["LIBFABRIC"]})
    assert "UCX_CUDA_IPC_ENABLE_GET_ZCOPY" not in env_with(
        kv_connector_extra_config={"backends": ["UCX"]}, kv_buffer_device="cpu"
    )
    for stack in ("dev", "prod", "xpyd", "baseline"):  # all on LIBFABRIC or without KV: nothing added
        for config in llm_configs({}, stack=stack).values():
            assert "UCX_CUDA_IPC_ENABLE_GET_ZCOPY" not in config.get("runtime_env", {}).get("env_vars", {}), stack
    # A serve file that sets it keeps its own value.
    own = put(decode, runtime_env=put(decode.runtime_env, env_vars={"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "auto"}))
    own = put(own, engine_kwargs=put(own.engine, kv_transfer_config=put(transfer, kv_connector_extra_config={})))
    assert with_kv_transfer_env(own).runtime_env.env_vars == {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "auto"}


def test_the_pd_sides_name_nixls_backends_as_a_list_and_the_same_on_both():
    roles = settings_of({}).serving.serve_document.roles

    def refusal(**backends) -> str:
        def with_backends(config, value):
            transfer = put(config.engine.kv_transfer_config, kv_connector_extra_config={"backends": value})
            return put(config, engine_kwargs=put(config.engine, kv_transfer_config=transfer))

        configs = {role: with_backends(c, backends.get(role, ["LIBFABRIC"])) for role, c in roles.items()}
        with pytest.raises(ConfigError) as caught:
            check_backends(configs, "my-serve.yaml")
        return str(caught.value)

    assert "decode engine_kwargs.kv_transfer_config.kv_connector_extra_config.backends = UCX: a list" in refusal(
        prefill=["UCX"], decode="UCX"
    )
    assert "did you mean UCX?" in refusal(prefill=["UXC"], decode=["UXC"])
    assert "= {prefill: [UCX], decode: [LIBFABRIC]}: the same on both PD sides" in refusal(prefill=["UCX"])
    check_backends(roles, "my-serve.yaml")  # the shipped document: LIBFABRIC on both


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"env_vars": ["A=1"]}, "runtime_env.env_vars = [A=1]: a mapping of variable names to strings"),
        ({"env_vars": {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": True}}, "UCX_CUDA_IPC_ENABLE_GET_ZCOPY = true: a string"),
        ({"env_vars": {"A": 1}}, "runtime_env.env_vars.A = 1: a string"),
        ({"env_var": {"A": "1"}}, "runtime_env.env_var: not a field of RuntimeEnv; did you mean env_vars?"),
    ],
    ids=["list", "yaml-on", "number", "typo"],
)
def test_a_runtime_env_is_refused_where_ray_would_fail_on_the_cluster(raw, said):
    """Ray takes env_vars as strings only and any other key as a plugin the image lacks: both fail at deploy."""
    with pytest.raises(ConfigError, match=re.escape(said)):
        RuntimeEnv.parse(raw, "my-serve.yaml", "prefill runtime_env")


def test_a_serve_file_may_not_carry_family_settings(monkeypatch):
    from ray_llm_eks.domain.serving import serve_config

    doc = _pd_file()
    doc["applications"][0]["args"]["decode_config"]["engine_kwargs"]["language_model_only"] = True
    monkeypatch.setattr(serve_config, "load_serve_file", lambda name: doc)
    error = settings_error({})
    assert "decode engine_kwargs.language_model_only" in str(error) and "model table" in str(error)


def test_workers_are_privileged_by_default_and_can_opt_out():
    group = spec_of()["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    group = spec_of({NS + "privilegedWorkers": False})["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_serve_only_change_is_not_a_cluster_change():
    """A different max_model_len changes serveConfigV2 only: applied in place, no replacement."""
    before, after = spec_of(), spec_of({NS + "maxModelLen": 2048})
    assert before["rayClusterConfig"] == after["rayClusterConfig"]
    assert max_model_lens(before["serveConfigV2"]) == {"prefill": 4096, "decode": 4096}
    assert max_model_lens(after["serveConfigV2"]) == {"prefill": 2048, "decode": 2048}


def test_dlc_registry_account_follows_the_region():
    spec = spec_of(region_overrides("af-south-1"))["rayClusterConfig"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "626614931356.dkr.ecr.af-south-1.amazonaws.com/ray:"
    )


def test_your_image_may_keep_its_tag_beside_its_digest():
    pinned = "example.com/team/ray:2.58.0-custom@sha256:" + "0f" * 32
    spec = spec_of({NS + "image": pinned, NS + "rayVersion": "2.58.0"})["rayClusterConfig"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == pinned


def test_dev_requirements_pin_the_images_ray():
    import ray

    assert ray.__version__ == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].ray


def test_vllm_argument_list_is_for_the_images_vllm():
    data = json.loads((ROOT / "ray_llm_eks" / "domain" / "data" / "vllm_engine_args.json").read_text())
    assert data["vllm_version"] == versions.DLC_IMAGES[config_keys.default("dlcImageTag")].vllm
    assert "vllm" in data["source"] and len(data["engine_args"]) > 100
    assert {"max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "kv_transfer_config"} <= set(
        data["engine_args"]
    )


SERVING_INVALID = {
    "unknown serve config": ({NS + "serveConfig": "pd"}, "serveConfig", "ray_llm_eks/serve_configs/"),
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
    "image without tag or digest": (
        {NS + "image": "example.com/ray", NS + "rayVersion": "2.58.0"},
        "image",
        "tag@sha256",
    ),
    "unknown DLC tag": ({NS + "dlcImageTag": "serve-llm-cuda"}, "dlcImageTag", "Ray version we know"),
    "service name too long": ({NS + "serviceName": "x" * 48}, "serviceName", "47"),
    "replicas beyond the pool": ({NS + "replicas": {"prefill": 2}}, "replicas.prefill", "at most 1"),
    "replicas for an unknown role": (
        {NS + "replicas": {"prefil": 1}},
        "replicas.prefil",
        "roles [prefill, decode, collocated]",
    ),
    "pools that do not match the app": (
        {NS + "serveConfig": "collocated"},
        "gpuPools",
        "exactly the pools",
    ),
    "chart version not exact": ({NS + "kuberayVersion": "1.7"}, "kuberayVersion", "exact version"),
}


@pytest.mark.parametrize("case", sorted(SERVING_INVALID))
def test_invalid_serving_value_is_refused_naming_key_and_rule(case):
    overrides, key, rule = SERVING_INVALID[case]
    error = settings_error(overrides)
    assert isinstance(error, ConfigError) and key in str(error) and rule in str(error), str(error)


def _pd_file() -> dict:
    return yaml.safe_load((ROOT / "ray_llm_eks" / "serve_configs" / "pd-disaggregated.yaml").read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "ray_llm_eks" / "serve_configs").glob("*.yaml")))
def test_every_serve_file_passes_ray_and_our_checks(name):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document
    from ray_llm_eks.domain.serving.serve_config import check_application

    doc = parse_document(yaml.safe_load((ROOT / "ray_llm_eks" / "serve_configs" / f"{name}.yaml").read_text()), name)
    ServeDeploySchema.model_validate(document_dict(doc))
    check_application(doc, name, "0.26.0")
    for config in doc.roles.values():
        LLMConfig.model_validate(to_dict(config))


def _breaks(mutate) -> str:
    from ray_llm_eks.domain.serving.serve_app import parse_document
    from ray_llm_eks.domain.serving.serve_config import check_application

    doc = _pd_file()
    mutate(doc["applications"][0]["args"])
    with pytest.raises(ConfigError) as caught:  # the structure's rules are the parse's, the rest check_application's
        check_application(parse_document(doc, "pd"), "pd", "0.26.0")
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
    overrides = {
        NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct",
        NS + "maxModelLen": 8192,
        NS + "hfToken": SecretValue("t"),
    }
    for config in llm_configs(overrides).values():
        assert config["model_loading_config"] == {
            "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "model_source": "meta-llama/Llama-3.1-8B-Instruct",
        }
        assert config["engine_kwargs"]["max_model_len"] == 8192


def test_serve_files_are_plain_data():
    files = sorted(p.name for p in (ROOT / "ray_llm_eks" / "serve_configs").iterdir())
    assert files == [
        "collocated.yaml",
        "data-parallel.yaml",
        "pd-disaggregated.yaml",
        "pd-xpyd.yaml",
        "tensor-parallel.yaml",
    ]
    for name in files:
        assert Path(ROOT / "ray_llm_eks" / "serve_configs" / name).read_text().count("import_path") == 1


@pytest.mark.parametrize(
    ("region", "repository"),
    [
        ("us-east-1", "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"),
        ("ap-east-1", "800184023465.dkr.ecr.ap-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"),
        ("cn-northwest-1", "961992271922.dkr.ecr.cn-northwest-1.amazonaws.com.cn/eks/aws-efa-k8s-device-plugin"),
    ],
)
def test_efa_plugin_image_comes_from_the_regions_registry(region, repository):
    assert settings_of(region_overrides(region)).serving.efa_plugin_image == repository


def test_region_without_an_eks_addon_registry_is_refused_naming_it(monkeypatch):
    monkeypatch.delitem(aws_facts.EKS_ADDON_REGISTRY_ACCOUNTS, "eu-west-1")
    error = settings_error(region_overrides("eu-west-1"))
    assert "aws:region = eu-west-1" in str(error) and "EKS add-on image registry" in str(error)
    settings_of(region_overrides("eu-west-1"), stack="baseline")  # no EFA pool: no EFA plugin to pull


def test_tensor_parallel_wider_than_the_node_names_the_gpus_per_node(monkeypatch):
    """Not "replicas.prefill = 1: at most 0": the cause is the instance's GPU count."""
    from ray_llm_eks.domain.serving import serve_config

    doc = _pd_file()
    doc["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["tensor_parallel_size"] = 2
    monkeypatch.setattr(serve_config, "load_serve_file", lambda name: doc)
    error = settings_error({})
    assert str(error) == (
        "Pulumi.dev.yaml: invalid config ray-llm-eks:gpuPools.prefill.instanceType = g6.8xlarge: an instance with "
        ">= 2 GPUs for "
        "tensor_parallel_size 2 (prefill); g6.8xlarge has 1 (tensor parallelism does not cross nodes here)"
    )
