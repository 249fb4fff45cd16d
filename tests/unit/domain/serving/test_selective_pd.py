"""Selective PD: the decode replica's decision (ray_llm_eks/serve_ingress/local_prefill.py, as the pods run it) and the
stack key selectivePd, rendered into the serve config the RayService runs."""

from __future__ import annotations

import pytest
import yaml

from ray_llm_eks.domain.render.ray_service import ray_service_spec
from ray_llm_eks.domain.serving import api_keys, serve_config
from ray_llm_eks.serve_ingress import local_prefill
from tests.conftest import settings_error, settings_of

NS = "ray-llm-eks:"


def test_a_prompt_shorter_than_the_threshold_is_prefilled_by_decode():
    assert local_prefill.path_for(99, 100) == local_prefill.LOCAL
    assert local_prefill.path_for(100, 100) == local_prefill.SPLIT  # "shorter than": the threshold itself splits
    assert local_prefill.path_for(5_000, 100) == local_prefill.SPLIT


def test_off_or_an_uncounted_prompt_takes_the_split_path():
    assert local_prefill.path_for(1, None) == local_prefill.SPLIT
    assert local_prefill.path_for(None, 100) == local_prefill.SPLIT


def test_threshold_read_from_the_decode_config():
    assert local_prefill.threshold({}) is None
    assert local_prefill.threshold({local_prefill.THRESHOLD_CONFIG: 512}) == 512
    for bad in (0, "512", True, 1.5):
        with pytest.raises(ValueError, match="a whole number of tokens"):
            local_prefill.threshold({local_prefill.THRESHOLD_CONFIG: bad})


def test_token_ids_are_counted_without_a_tokenizer_and_text_is_not():
    assert local_prefill.given_token_count([1, 2, 3]) == 3
    assert local_prefill.given_token_count([[1, 2], [3]]) == 3
    assert local_prefill.given_token_count("hello") is None
    assert local_prefill.given_token_count(["a", "b"]) is None
    assert local_prefill.given_token_count([]) is None


def test_tokenize_request_takes_only_what_the_client_set_of_the_shared_fields():
    fields = {"messages": [{"role": "user", "content": "hi"}], "tools": None, "max_tokens": 8, "model": "m"}
    shared = {"messages", "tools", "model", "add_generation_prompt"}
    assert local_prefill.tokenize_fields(fields, {"messages", "max_tokens", "model"}, shared) == {
        "messages": fields["messages"],
        "model": "m",
    }


def test_the_stack_and_the_replica_name_the_same_config_key():
    assert serve_config.LOCAL_PREFILL_BELOW == local_prefill.THRESHOLD_CONFIG


def test_selective_pd_renders_the_selective_builder_and_the_threshold_on_decode_only():
    app = settings_of({NS + "selectivePd": "1024"}).serving.serve_document.application
    assert app.import_path == serve_config.SELECTIVE_PD_IMPORT
    assert app.roles["decode"].experimental_configs == {serve_config.LOCAL_PREFILL_BELOW: 1024}
    assert "experimental_configs" not in app.roles["prefill"]
    off = settings_of({}).serving.serve_document.application
    assert off.import_path == serve_config.PD_IMPORT and "experimental_configs" not in off.roles["decode"]


def test_selective_pd_ships_its_decode_server_with_the_ingress_code_and_changes_only_the_serve_config():
    selective = settings_of({NS + "selectivePd": "1024"})
    assert {"local_prefill.py", "selective_pd.py"} <= set(api_keys.SHIPPED_MODULES)
    # Turning it on changes the serve config alone, not the Ray cluster (the code's digest is the same).
    on, off = ray_service_spec(selective), ray_service_spec(settings_of())
    assert on["rayClusterConfig"] == off["rayClusterConfig"] and on["serveConfigV2"] != off["serveConfigV2"]
    spec = on
    assert yaml.safe_load(spec["serveConfigV2"])["applications"][0]["import_path"] == serve_config.SELECTIVE_PD_IMPORT


@pytest.mark.parametrize(
    ("values", "stack", "line"),
    [
        ({NS + "selectivePd": "many"}, "dev", "selectivePd = many: off, or a prompt length in tokens"),
        ({NS + "selectivePd": "0"}, "dev", ": off, or a prompt length in tokens"),
        (
            {NS + "selectivePd": "1024"},
            "baseline",
            "selectivePd = 1024: off: ray_llm_eks/serve_configs/collocated.yaml has no prefill",
        ),
        ({NS + "selectivePd": "1024", NS + "apiKeyCheck": False}, "dev", "off while apiKeyCheck is false"),
    ],
)
def test_bad_selective_pd_is_one_line(values, stack, line):
    error = str(settings_error(values, stack))
    assert line in error and "\n" not in error
