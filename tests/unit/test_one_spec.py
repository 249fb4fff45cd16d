"""The one builder of the RayService that deploys (domain/ray_service.py ray_service_spec): its
serve document is the keyed one, and every Ray pod carries what the key check needs."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import yaml

from adapters import stack
from domain import api_keys
from domain.ray_service import ray_service_spec, served_document


@pytest.fixture(scope="module", params=["dev", "baseline"])
def settings(request):
    return stack.load_settings(stack.stack_file(request.param))


def _ray_pods(spec: dict) -> list[dict]:
    cluster = spec["rayClusterConfig"]
    return [g["template"]["spec"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]


def test_the_spec_serves_the_served_document_and_it_is_keyed(settings):
    spec = ray_service_spec(settings)
    document = yaml.safe_load(spec["serveConfigV2"])
    assert document == served_document(settings)
    for app in document["applications"]:
        assert app["args"]["ingress_cls_config"] == {"ingress_cls": api_keys.INGRESS_CLS}
        env = app["runtime_env"]["env_vars"]
        assert env["PYTHONPATH"] == f"{api_keys.MODULE_DIR}:${{PYTHONPATH}}"
        assert env[api_keys.KEYS_FILE_ENV] == f"{api_keys.KEYS_DIR}/{api_keys.KEYS_FILE}"
    # The stack's own applications are all there, unchanged but for the key check.
    unkeyed = copy.deepcopy(document)
    for app in unkeyed["applications"]:
        del app["args"]["ingress_cls_config"]
        env = app["runtime_env"]["env_vars"]
        del env["PYTHONPATH"], env[api_keys.KEYS_FILE_ENV]
        if not env:
            del app["runtime_env"]["env_vars"]
        if not app["runtime_env"]:
            del app["runtime_env"]
    assert unkeyed == settings.serving.serve_document


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


def test_the_hugging_face_token_reaches_head_and_workers_only_when_the_stack_has_one(settings):
    def token_users(spec):
        return [
            c["name"]
            for pod in _ray_pods(spec)
            for c in pod["containers"]
            if any(e["name"] == "HF_TOKEN" for e in c.get("env", []))
        ]

    assert token_users(ray_service_spec(settings)) == []
    with_token = token_users(ray_service_spec(replace(settings, hf_token_set=True)))
    assert with_token == ["ray-head"] + ["ray-worker"] * len(settings.gpu_pools)


def test_on_this_machine_moves_only_the_two_pod_paths(settings):
    keyed = served_document(settings)
    local = api_keys.on_this_machine(keyed, "/repo/serve_ingress", "/tmp/keys")
    assert local == api_keys.on_this_machine(settings.serving.serve_document, "/repo/serve_ingress", "/tmp/keys")
    for pod_app, local_app in zip(keyed["applications"], local["applications"], strict=True):
        env = local_app["runtime_env"]["env_vars"]
        assert env["PYTHONPATH"] == "/repo/serve_ingress:${PYTHONPATH}" and env[api_keys.KEYS_FILE_ENV] == "/tmp/keys"
        moved = copy.deepcopy(local_app)
        moved["runtime_env"]["env_vars"] |= {
            k: pod_app["runtime_env"]["env_vars"][k] for k in ("PYTHONPATH", api_keys.KEYS_FILE_ENV)
        }
        assert moved == pod_app


def test_worker_groups_come_in_the_order_pulumi_up_hands_the_pools_over():
    """The CLI passes gpuPools as JSON with sorted keys (Go's encoding/json): whatever order the
    stack file lists the pools in, the plan's worker groups are the deployed ones, in name order."""
    config = stack.stack_file("dev")
    pools = json.loads(config.values["ray-llm-eks:gpuPools"])
    assert list(pools) == sorted(pools) == ["decode", "prefill"]  # the file lists prefill first
    groups = ray_service_spec(stack.load_settings(config))["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["decode", "prefill"]
