"""The typed serve document (ray_llm_eks/domain/serving/serve_app.py, llm_config.py, fields.py) called directly: one
parse and one serialization give back every shipped serve file and every golden served document; the
transformations' order is a dict's under the same edits; the parse refuses what Ray would refuse on the cluster."""

from __future__ import annotations

import copy

import pytest
import yaml

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.serving.fields import drop, ensure, put, put_last, to_dict
from ray_llm_eks.domain.serving.llm_config import DeploymentConfig, EngineKwargs, LlmConfig, RequestRouterConfig
from ray_llm_eks.domain.serving.serve_app import (
    COLLOCATED_IMPORT,
    PdAppArgs,
    ServeDocument,
    document_dict,
    parse_document,
    to_yaml,
)
from ray_llm_eks.domain.serving.serve_config import SERVE_CONFIG_DIR
from tests.conftest import ROOT

SERVE_FILES = sorted(SERVE_CONFIG_DIR.glob("*.yaml"))
GOLDENS = sorted((ROOT / "tests" / "data" / "served_documents").glob("*.yaml"))
FILE = "mine.yaml"


def collocated(**config) -> dict:
    """A collocated serve document with one LLM config made of `config`."""
    return {"applications": [{"name": "llm", "import_path": COLLOCATED_IMPORT, "args": {"llm_configs": [config]}}]}


def refusal(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_document(raw, FILE)
    assert caught.value.file == FILE
    return caught.value


@pytest.mark.parametrize("path", SERVE_FILES, ids=lambda p: p.stem)
def test_every_serve_file_comes_back_as_it_was_written(path):
    raw = yaml.safe_load(path.read_text())
    doc = parse_document(copy.deepcopy(raw), path.name)
    assert document_dict(doc) == raw
    assert to_yaml(doc) == yaml.safe_dump(raw, sort_keys=False, width=120)  # the order of every key too


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_every_served_document_comes_back_byte_for_byte(path):
    text = yaml.safe_load(path.read_text())["serveConfigV2"]
    assert to_yaml(parse_document(yaml.safe_load(text), path.name)) == text


def test_the_roles_are_read_from_the_app_s_arguments():
    pd = parse_document(yaml.safe_load((SERVE_CONFIG_DIR / "pd-disaggregated.yaml").read_text()), "pd")
    assert list(pd.roles) == ["prefill", "decode"] and pd.pd and not pd.selective_pd
    assert isinstance(pd.application.args, PdAppArgs)
    assert pd.roles["decode"].engine.kv_transfer_config.kv_role == "kv_consumer"
    assert pd.model_id == "Qwen/Qwen3.5-9B" and pd.local_prefill_below is None
    one = parse_document(collocated(model_loading_config={"model_id": "m"}), FILE)
    assert list(one.roles) == ["collocated"] and one.roles["collocated"].model.source == "m"


def test_a_key_is_present_as_written_even_when_null():
    config = parse_document(collocated(accelerator_type=None), FILE).roles["collocated"]
    assert "accelerator_type" in config and config["accelerator_type"] is None
    assert "runtime_env" not in config and config.get("runtime_env", "absent") == "absent"
    assert to_dict(config) == {"accelerator_type": None}


def test_put_keeps_a_present_key_in_place_and_adds_a_new_one_last():
    engine = EngineKwargs.of(max_model_len=1, reasoning_parser="r", tensor_parallel_size=2)
    changed = put(engine, max_model_len=8, block_size=16, enable_thinking=True)
    assert list(changed) == [
        "max_model_len",
        "reasoning_parser",
        "tensor_parallel_size",
        "block_size",
        "enable_thinking",
    ]
    assert changed.max_model_len == 8 and changed["enable_thinking"] is True  # a vLLM argument not typed: extra
    assert list(engine) == ["max_model_len", "reasoning_parser", "tensor_parallel_size"]  # the original unchanged


def test_put_types_plain_data_given_for_a_typed_mapping():
    deployment = put(DeploymentConfig(), request_router_config={"request_router_class": "x"})
    assert isinstance(deployment.request_router_config, RequestRouterConfig)
    assert deployment.request_router_config.request_router_class == "x"


def test_put_last_moves_the_key_last_and_drop_removes_it():
    deployment = DeploymentConfig.of(request_router_config={"request_router_class": "x"}, num_replicas=1)
    assert list(put_last(deployment, request_router_config={"request_router_class": "y"})) == [
        "num_replicas",
        "request_router_config",
    ]
    assert list(put(deployment, request_router_config={})) == ["request_router_config", "num_replicas"]
    dropped = drop(deployment, "num_replicas", "absent_key")
    assert list(dropped) == ["request_router_config"] and dropped.num_replicas is None
    engine = drop(EngineKwargs.of(reasoning_parser="r", max_model_len=4), "reasoning_parser")
    assert to_dict(engine) == {"max_model_len": 4}


def test_ensure_adds_the_missing_empty_mappings_in_the_order_asked():
    config = LlmConfig.of(engine_kwargs={"max_model_len": 4})
    ensured = ensure(config, "model_loading_config", "engine_kwargs", "deployment_config")
    assert to_dict(ensured) == {
        "engine_kwargs": {"max_model_len": 4},
        "model_loading_config": {},
        "deployment_config": {},
    }
    assert ensure(ensured, "engine_kwargs") is ensured


def test_the_order_matches_a_dict_under_the_same_edits():
    """A setdefault adds the key last, a pop and assignment moves it last: as the render's dict edits did."""
    raw = {"engine_kwargs": {"max_model_len": 4}, "accelerator_type": "L4"}
    edited = copy.deepcopy(raw)
    edited.setdefault("runtime_env", {}).setdefault("env_vars", {})["A"] = "1"
    edited.pop("accelerator_type")
    edited["accelerator_type"] = "L40S"
    config = ensure(LlmConfig.parse(raw, FILE, "collocated"), "runtime_env")
    config = put(config, runtime_env=put(config.runtime_env, env_vars={"A": "1"}))
    config = put_last(config, accelerator_type="L40S")
    assert list(to_dict(config)) == list(edited) == ["engine_kwargs", "runtime_env", "accelerator_type"]
    assert to_dict(config) == edited


def test_a_transformation_returns_a_new_document():
    raw = yaml.safe_load((SERVE_CONFIG_DIR / "collocated.yaml").read_text())
    doc = parse_document(raw, "collocated")
    longer = doc.map_roles(lambda role, config: put(config, engine_kwargs=put(config.engine, max_model_len=99)))
    assert longer.roles["collocated"].engine.max_model_len == 99
    assert document_dict(doc) == raw and isinstance(longer, ServeDocument)
    with pytest.raises(AttributeError):
        doc.roles["collocated"].engine.max_model_len = 1  # type: ignore[misc]


def test_one_application_of_a_serve_llm_builder_is_required():
    assert refusal({"applications": []}).key == "applications"
    wrong = refusal({"applications": [{"import_path": "my.module:app"}]})
    assert wrong.key == "import_path" and wrong.value == "my.module:app"


def test_an_argument_the_builder_does_not_take_is_refused_naming_the_closest():
    raw = collocated()
    raw["applications"][0]["args"]["llm_config"] = []
    error = refusal(raw)
    assert error.key == "args.llm_config" and "did you mean llm_configs?" in str(error)


def test_a_pd_app_needs_both_sides_and_a_collocated_one_exactly_one_config():
    pd = {"applications": [{"import_path": "ray.serve.llm:build_pd_openai_app", "args": {"prefill_config": {}}}]}
    assert refusal(pd).key == "args.decode_config"
    two = collocated()
    two["applications"][0]["args"]["llm_configs"].append({})
    assert refusal(two).key == "args.llm_configs"


@pytest.mark.parametrize(
    ("config", "key", "closest"),
    [
        ({"accelerator_typ": "L4"}, "collocated accelerator_typ", "accelerator_type"),
        ({"model_loading_config": {"model_di": "m"}}, "collocated model_loading_config.model_di", "model_id"),
        (
            {"deployment_config": {"autoscaling_config": {"max_replica": 2}}},
            "collocated deployment_config.autoscaling_config.max_replica",
            "max_replicas",
        ),
        ({"placement_group_config": {"strategi": "PACK"}}, "collocated placement_group_config.strategi", "strategy"),
    ],
)
def test_an_unknown_field_of_ray_s_closed_models_is_refused(config, key, closest):
    error = refusal(collocated(**config))
    assert error.key == key and f"did you mean {closest}?" in str(error)


def test_the_open_mappings_pass_unknown_keys_through():
    config = {"engine_kwargs": {"my_vllm_flag": 1}, "runtime_env": {"pip": ["x"]}, "log_engine_metrics": True}
    doc = parse_document(collocated(**config), FILE)
    assert document_dict(doc)["applications"][0]["args"]["llm_configs"][0] == config


@pytest.mark.parametrize(
    ("config", "key", "allowed"),
    [
        ({"accelerator_type": 4}, "collocated accelerator_type", "a string"),
        ({"deployment_config": {"num_replicas": "2"}}, "collocated deployment_config.num_replicas", "an integer"),
        (
            {"deployment_config": {"autoscaling_config": {"min_replicas": True}}},
            "collocated deployment_config.autoscaling_config.min_replicas",
            "an integer",
        ),
    ],
)
def test_a_typed_field_of_another_json_type_is_refused(config, key, allowed):
    error = refusal(collocated(**config))
    assert error.key == key and error.allowed == allowed


def test_vllm_s_values_are_left_to_the_check_against_the_image_s_vllm():
    """engine_args.py names vLLM's own rule for them (and the version it comes from)."""
    engine = {"max_model_len": "4096", "kv_transfer_config": {"kv_role": 1}}
    doc = parse_document(collocated(engine_kwargs=engine), FILE)
    assert document_dict(doc)["applications"][0]["args"]["llm_configs"][0]["engine_kwargs"] == engine


def test_a_whole_number_is_a_number():
    doc = parse_document(collocated(deployment_config={"autoscaling_config": {"target_ongoing_requests": 2}}), FILE)
    assert doc.roles["collocated"].deployment.autoscaling_config.target_ongoing_requests == 2


def test_a_request_router_is_checked_where_it_is_written():
    """As routing.py checks it: its kwargs too, which Ray reads only when the router starts."""
    router = {
        "request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
        "request_router_kwargs": {"imbalanced_threshol": 2},
    }
    error = refusal(collocated(deployment_config={"request_router_config": router}))
    assert error.key == "collocated deployment_config.request_router_config.request_router_kwargs.imbalanced_threshol"
    raw = collocated()
    raw["applications"][0]["deployments"] = [{"name": "OpenAiIngress", "request_router_config": {"x": 1}}]
    assert refusal(raw).key == "deployments[OpenAiIngress].request_router_config.x"
