"""The role view of a rendered serve document: one rule for the context length vLLM runs at."""

import pytest

from ray_llm_eks.domain.serving.role_view import views_of
from ray_llm_eks.domain.serving.serve_app import parse_document


def _doc(engine_kwargs: dict, deployment: dict | None = None) -> dict:
    config = {
        "model_loading_config": {"model_id": "m", "model_source": "org/m"},
        "engine_kwargs": engine_kwargs,
        "deployment_config": deployment or {"num_replicas": 2},
    }
    return {"applications": [{"import_path": "ray.serve.llm:build_openai_app", "args": {"llm_configs": [config]}}]}


def role_views(doc: dict, where: str, max_context=None):
    return views_of(parse_document(doc, where).roles, max_context)


def _context(model_id: str, source: str) -> int:
    assert (model_id, source) == ("m", "org/m")
    return 32768


@pytest.mark.parametrize(("given", "effective", "auto"), [(None, 32768, False), (-1, 32768, True), (4096, 4096, False)])
def test_max_model_len_unset_or_auto_is_the_models_derived_length(given, effective, auto):
    engine = {} if given is None else {"max_model_len": given}
    (view,) = role_views(_doc(engine), "t", _context).values()
    assert (view.max_model_len, view.max_model_len_auto) == (effective, auto)


def test_a_set_max_model_len_needs_no_model_lookup():
    def unknown(*_):
        raise AssertionError("looked up")

    assert role_views(_doc({"max_model_len": 2048}), "t", unknown)["collocated"].max_model_len == 2048


def test_view_fields():
    doc = _doc({"max_model_len": 2048, "tensor_parallel_size": 2, "pipeline_parallel_size": 3},
               {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4}})  # fmt: skip
    view = role_views(doc, "t", _context)["collocated"]
    assert (view.model_id, view.model_source, view.gpus_per_replica) == ("m", "org/m", 6)
    assert (view.replicas.min, view.replicas.initial, view.replicas.max, view.replicas.autoscales) == (1, 1, 4, True)
    with pytest.raises(TypeError):
        view.engine["max_model_len"] = 1  # read-only


@pytest.mark.parametrize(("given", "read"), [(None, None), (-1, None), (4096, 4096)])
def test_a_reader_without_the_models_length_reads_only_a_set_max_model_len(given, read):
    engine = {} if given is None else {"max_model_len": given}
    view = role_views(_doc(engine), "t")["collocated"]
    assert (view.max_model_len, view.model_id, view.replicas.initial) == (read, "m", 2)
