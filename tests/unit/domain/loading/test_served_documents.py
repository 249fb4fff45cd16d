"""The serve document each stack deploys, byte for byte: the six shipped stacks and the stack keys and serve files
of one's own that no shipped stack exercises. Each case's serveConfigV2 text (keyed where the stack keys it), its
fit lines and the roles whose max_num_seqs the fit derived are held in tests/data/served_documents/<case>.yaml. A
change of the rendering that is meant rewrites them (UPDATE_GOLDENS=1 pytest on this file); the diff of the goldens is
the change to review."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from ray_llm_eks.adapters import stack as stack_adapter
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from tests.conftest import ROOT, STACKS

GOLDENS = ROOT / "tests" / "data" / "served_documents"
NS = "ray-llm-eks:"
LLAMA = {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct"}
# A dense model of the user's (no family in the model table): its serve file says what it needs.
SMALL_SPEC = {
    "parameters": 3e9,
    "weightDtype": "bfloat16",
    "kvLayers": 28,
    "kvHeads": 8,
    "headDim": 128,
    "stateMiBPerSequence": 0,
    "maxContext": 32768,
}

# Serve files of one's own (serveConfig: a path beside the stack file), with what no shipped file has: a router
# the stack replaces, the file's own env vars, experimental configs, application fields Ray passes through, no
# deployment_config, autoscaling bounds the stack changes one of.
OWN_PD = """\
applications:
  - name: llm
    route_prefix: /
    import_path: ray.serve.llm:build_pd_openai_app
    runtime_env:
      env_vars: {APP_LEVEL: "1"}
    args:
      prefill_config:
        model_loading_config: {model_id: Qwen/Qwen3.5-9B}
        engine_kwargs:
          max_model_len: 4096
          enable_prefix_caching: true
          kv_transfer_config:
            kv_connector: NixlConnector
            kv_role: kv_producer
            kv_connector_extra_config: {backends: [LIBFABRIC]}
        deployment_config:
          request_router_config:
            request_router_class: ray.serve.llm.request_router.PrefixCacheAffinityRouter
            request_router_kwargs: {imbalanced_threshold: 2}
          num_replicas: 1
        runtime_env:
          env_vars: {VLLM_LOGGING_LEVEL: DEBUG}
      decode_config:
        model_loading_config: {model_id: Qwen/Qwen3.5-9B, model_source: Qwen/Qwen3.5-9B}
        engine_kwargs:
          max_model_len: 4096
          kv_transfer_config:
            {kv_connector: NixlConnector, kv_role: kv_consumer, kv_buffer_device: cuda,
             kv_connector_extra_config: {backends: [LIBFABRIC]}}
        experimental_configs: {stream_batching_interval_ms: 50}
        log_engine_metrics: true
    deployments:
      - name: OpenAiIngress
        max_ongoing_requests: 200
http_options:
  port: 8000
"""
# A collocated application of the user's own: its one LLM config follows.
COLLOCATED_APP = """\
applications:
  - name: llm
    route_prefix: /
    import_path: ray.serve.llm:build_openai_app
    args:
      llm_configs:
"""
OWN_COLLOCATED = (
    COLLOCATED_APP
    + """\
        - model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}
          engine_kwargs: {max_model_len: 8192}
"""
)
OWN_AUTOSCALING = (
    COLLOCATED_APP
    + """\
        - model_loading_config: {model_id: Qwen/Qwen3.5-9B}
          engine_kwargs: {max_model_len: 4096, max_num_seqs: 48}
          deployment_config:
            autoscaling_config: {min_replicas: 1, max_replicas: 1, upscale_delay_s: 30}
            max_ongoing_requests: 64
"""
)

# case -> (stack, overrides, the serve file of one's own it names or None)
CASES: dict[str, tuple[str, dict, str | None]] = {
    **{stack: (stack, {}, None) for stack in STACKS},
    "model-id": ("dev", LLAMA, None),
    "model-source-s3": ("dev", {NS + "modelSource": "s3://my-weights/qwen3.5-9b"}, None),
    "max-model-len": ("baseline", {NS + "maxModelLen": 2048}, None),
    "replicas": ("dev", {NS + "replicas": {"decode": 1}}, None),
    "autoscaling-over-replicas": ("dev", {NS + "autoscaling": {"decode": {"maxReplicas": 1}}}, None),
    "autoscaling-one-bound": ("xpyd", {NS + "autoscaling": {"decode": {"maxReplicas": 3}}}, None),
    "kv-buffer-cpu": ("dev", {**LLAMA, NS + "kvBufferDevice": "cpu"}, None),
    "selective-pd": ("dev", {NS + "selectivePd": "1024"}, None),
    "max-num-seqs": ("baseline", {NS + "maxNumSeqs": "32"}, None),
    "model-spec": ("baseline", {NS + "modelId": "acme/small-3b", NS + "modelSpec": SMALL_SPEC}, None),
    "routing-prefix": ("baseline", {**LLAMA, NS + "routing": {"collocated": {"policy": "prefixAffinity"}}}, None),
    "unkeyed": ("dev", {NS + "apiKeyCheck": False}, None),
    "own-pd-routed-by-the-stack": ("dev", {NS + "routing": {"prefill": {"policy": "powerOfTwo"}}}, OWN_PD),
    "own-pd-unkeyed": ("dev", {NS + "apiKeyCheck": False}, OWN_PD),
    "own-collocated-replicas": ("baseline", {NS + "replicas": {"collocated": 1}}, OWN_COLLOCATED),
    "own-autoscaling": ("baseline", {NS + "autoscaling": {"collocated": {"minReplicas": 1}}}, OWN_AUTOSCALING),
}


def served(case: str, tmp_path: Path) -> dict:
    """What the case's stack deploys: the serveConfigV2 text, the fit's lines, the roles whose max_num_seqs it
    derived."""
    stack, overrides, own = CASES[case]
    if own is not None:
        (tmp_path / "my-serve.yaml").write_text(own)
        overrides = {**overrides, NS + "serveConfig": "my-serve.yaml"}
    config = stack_adapter.stack_file(stack, ROOT, overrides=overrides)
    settings = stack_adapter.load_settings(dataclasses.replace(config, folder=tmp_path))
    return {
        "serveConfigV2": ray_service_spec(settings)["serveConfigV2"],
        "fit": list(settings.serving.fit),
        "maxNumSeqsDerived": sorted(settings.serving.max_num_seqs_derived),
    }


class _Golden(yaml.SafeDumper):
    """Multi-line strings as literal blocks: a golden's serveConfigV2 reads (and diffs) as the YAML it is."""


_Golden.add_representer(
    str, lambda dumper, s: dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_served_document_is_the_golden_one(case, tmp_path):
    found = served(case, tmp_path)
    golden = GOLDENS / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDENS"):
        GOLDENS.mkdir(parents=True, exist_ok=True)
        golden.write_text(yaml.dump(found, Dumper=_Golden, sort_keys=False, width=120))
    assert golden.exists(), f"no golden for {case}: UPDATE_GOLDENS=1 pytest {Path(__file__).relative_to(ROOT)}"
    expected = yaml.safe_load(golden.read_text())
    assert found["serveConfigV2"] == expected["serveConfigV2"]  # the text, byte for byte
    assert found == expected


def test_every_golden_is_a_case():
    """A case removed takes its golden with it (a golden nothing reads would hold nothing)."""
    assert sorted(p.stem for p in GOLDENS.glob("*.yaml")) == sorted(CASES)
