"""The one builder of the RayService that deploys (ray_llm_eks/domain/render/ray_service.py ray_service_spec): its
serve document is the keyed one, and every Ray pod carries what the key check needs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render.ray_service import ray_service_spec, replacement_paths, served_document
from ray_llm_eks.domain.serving import api_keys, serve_app, serve_config
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.llm_config import LlmConfig
from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document, parse_llm_config
from tests.conftest import ROOT


@pytest.fixture(scope="module", params=["dev", "baseline"])
def settings(request):
    return stack.load_settings(stack.stack_file(request.param, ROOT))


def _ray_pods(spec: dict) -> list[dict]:
    cluster = spec["rayClusterConfig"]
    return [g["template"]["spec"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]


def test_the_spec_serves_the_served_document_and_it_is_keyed(settings):
    spec = ray_service_spec(settings)
    document = yaml.safe_load(spec["serveConfigV2"])
    assert document == document_dict(served_document(settings))
    shipped = {
        "PYTHONPATH": f"{api_keys.MODULE_DIR}:${{PYTHONPATH}}",
        api_keys.WORKER_SETUP_HOOK_ENV: api_keys.WORKER_SETUP_HOOK,
    }
    keys = {
        api_keys.KEYS_FILE_ENV: f"{api_keys.KEYS_DIR}/{api_keys.KEYS_FILE}",
        api_keys.MAX_BODY_ENV: str(settings.hardening.max_request_bytes),
    }
    app = document["applications"][0]
    assert app["args"]["ingress_cls_config"] == {"ingress_cls": api_keys.INGRESS_CLS}

    # Every worker of the app, engine replicas included (their LLM config's env replaces the app's),
    # can import the shipped code and runs its setup hook; the ingress alone reads the keys.
    def without_shipped_code(holder: dict, wanted: dict) -> None:
        assert holder["runtime_env"].pop("worker_process_setup_hook") == api_keys.WORKER_SETUP_HOOK
        env = holder["runtime_env"]["env_vars"]
        assert {key: env.get(key) for key in wanted} == wanted
        for key in wanted:
            del env[key]
        if not env:
            del holder["runtime_env"]["env_vars"]
        if not holder["runtime_env"]:
            del holder["runtime_env"]

    collocated = app["import_path"] == serve_app.COLLOCATED_IMPORT

    def role_without_shipped_code(role: str, config: LlmConfig) -> LlmConfig:
        plain = to_dict(config)
        without_shipped_code(plain, shipped)
        # A collocated app's engine replicas send a stream's first chunk at once (serve_ingress/first_chunk.py);
        # the PD apps' decode servers do in the builders below.
        if collocated:
            assert plain.pop("server_cls") == serve_app.FIRST_CHUNK_SERVER
        return parse_llm_config(plain, "spec", role)

    without_shipped_code(app, shipped | keys)
    document = document_dict(parse_document(document, "spec").map_roles(role_without_shipped_code))
    app = document["applications"][0]
    del app["args"]["ingress_cls_config"]
    # A PD app runs Ray's builder through the prefill guard (ray_llm_eks/serve_ingress/prefill_guard.py).
    if app["import_path"] == serve_config.GUARDED_PD_IMPORT:
        app["import_path"] = serve_config.PD_IMPORT
    # The stack's own application is there, unchanged but for the key check and the shipped code.
    assert document == document_dict(settings.serving.serve_document)


def test_every_ray_pod_mounts_the_keys_and_the_ingress_code_read_only(settings):
    pods = _ray_pods(ray_service_spec(settings))
    assert len(pods) == 1 + len(settings.gpu_pools)
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["api-keys"]["secret"] == {"secretName": api_keys.SECRET_NAME}
        assert volumes["api-key-ingress"]["configMap"] == {"name": api_keys.CONFIG_MAP_NAME}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[api_keys.KEYS_DIR] == {"name": "api-keys", "mountPath": api_keys.KEYS_DIR, "readOnly": True}
        assert mounts[api_keys.MODULE_DIR]["name"] == "api-key-ingress" and mounts[api_keys.MODULE_DIR]["readOnly"]


def test_every_ray_pod_that_mounts_the_code_names_its_digest_so_new_code_makes_a_new_cluster(settings, monkeypatch):
    """The digest of the modules the ConfigMap carries is in each Ray pod's template: KubeRay's cluster hash covers
    it, and the stack replaces the RayService on any change under rayClusterConfig (replacement_paths)."""
    spec = ray_service_spec(settings)
    modules = api_keys.SHIPPED_MODULES
    digest = api_keys.code_digest(modules)
    templates = [spec["rayClusterConfig"]["headGroupSpec"]["template"]] + [
        g["template"] for g in spec["rayClusterConfig"]["workerGroupSpecs"]
    ]
    assert [t["metadata"]["annotations"][api_keys.CODE_ANNOTATION] for t in templates] == [digest] * len(templates)
    paths = replacement_paths(spec)
    assert (
        "spec.rayClusterConfig.headGroupSpec" in paths and "spec.rayClusterConfig.workerGroupSpecs[*].template" in paths
    )
    # One module's text changed: another digest, so another pod template.
    sources = api_keys.ingress_sources(modules)
    changed = {**sources, "first_chunk.py": sources["first_chunk.py"] + "\n# a change\n"}
    monkeypatch.setattr(api_keys, "ingress_sources", lambda _modules=(): changed)
    assert api_keys.code_digest(modules) != digest
    annotations = ray_service_spec(settings)["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert annotations[api_keys.CODE_ANNOTATION] == api_keys.code_digest(modules)


def test_the_hugging_face_token_reaches_head_and_workers_only_when_the_stack_has_one(settings):
    def token_users(spec):
        return [
            c["name"]
            for pod in _ray_pods(spec)
            for c in pod["containers"]
            if any(e["name"] == "HF_TOKEN_PATH" for e in c.get("env", []))
            and any(m["name"] == "hf-token" for m in c.get("volumeMounts", []))
        ]

    assert token_users(ray_service_spec(settings)) == []
    with_token = token_users(ray_service_spec(replace(settings, hf_token_set=True)))
    assert with_token == ["ray-head"] + ["ray-worker"] * len(settings.gpu_pools)


def test_on_this_machine_moves_only_the_two_pod_paths(settings):
    keyed = served_document(settings)
    moved = api_keys.on_this_machine(keyed, "/repo/serve_ingress", "/tmp/keys")
    limit = settings.hardening.max_request_bytes
    assert moved == api_keys.on_this_machine(settings.serving.serve_document, "/repo/serve_ingress", "/tmp/keys", limit)
    assert moved.application.runtime_env.env_vars[api_keys.KEYS_FILE_ENV] == "/tmp/keys"
    local = document_dict(moved)
    assert "/repo/serve_ingress:${PYTHONPATH}" in json.dumps(local)
    pod_paths = json.dumps(local).replace("/repo/serve_ingress", api_keys.MODULE_DIR)
    assert json.loads(
        pod_paths.replace('"/tmp/keys"', json.dumps(f"{api_keys.KEYS_DIR}/{api_keys.KEYS_FILE}"))
    ) == document_dict(keyed)


def test_worker_groups_come_in_the_order_pulumi_up_hands_the_pools_over():
    """The CLI passes gpuPools as JSON with sorted keys (Go's encoding/json): whatever order the
    stack file lists the pools in, the plan's worker groups are the deployed ones, in name order."""
    config = stack.stack_file("dev", ROOT)
    pools = json.loads(config.values["ray-llm-eks:gpuPools"])
    assert list(pools) == sorted(pools) == ["decode", "prefill"]  # the file lists prefill first
    groups = ray_service_spec(stack.load_settings(config))["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["decode", "prefill"]
