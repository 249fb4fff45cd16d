"""Keys by default, as the program declares them (under Pulumi's mocks)."""

from __future__ import annotations

import json

from offline.plan import run_program
from ray_llm_eks.adapters.stackfile import SecretValue

NS = "ray-llm-eks:"
KEY = "sk-canary-0123456789abcdef-do-not-leak"
KEY_OBJECTS = {("kubernetes:core/v1:Secret", "llm-api-keys"), ("kubernetes:core/v1:ConfigMap", "llm-api-key-ingress")}


def test_up_without_keys_generates_one_in_the_graph_a_secret_everywhere(tmp_path, capsys):
    """A plain `pulumi up` (no Makefile, no apiKeys): one key from pulumi-random, in the key Secret and the stack
    output apiKey, both secrets; the plan's files and outputs never hold it in plain text."""
    plan = run_program("dev", {}, offline_plan=False)
    generated = plan.one("random:index/randomPassword:RandomPassword", "llm-api-key")
    assert generated.inputs["length"] == 48 and generated.inputs["special"] is False
    assert plan.by_urn[generated.parent].type == "ray-llm-eks:llm_service:LlmService"
    secret = plan.one("kubernetes:core/v1:Secret", "llm-api-keys")
    assert secret.inputs["stringData"] == "[secret]" and generated.urn in secret.dependencies
    assert plan.outputs["apiKey"] == "[secret]"
    plan.write(tmp_path)
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "randomPassword:RandomPassword::llm-api-key.result" not in written + json.dumps(plan.outputs)


def test_a_stack_with_keys_generates_none():
    plan = run_program("dev", {NS + "apiKeys": SecretValue(KEY)}, offline_plan=False)
    generated = {r.name for r in plan.of_type("random:index/randomPassword:RandomPassword")}
    assert "llm-api-key" not in generated and "apiKey" not in plan.outputs  # (Ray's token is random either way)


def test_up_with_a_key_declares_it_only_as_a_secret(tmp_path, capsys):
    plan = run_program("dev", {NS + "apiKeys": SecretValue(KEY)}, offline_plan=False)
    secret = plan.one("kubernetes:core/v1:Secret", "llm-api-keys")
    assert secret.inputs["stringData"] == "[secret]"
    plan.write(tmp_path)
    print(plan.summary())
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    shown = json.dumps(plan.resources_json()) + json.dumps(plan.outputs) + "".join(plan.warnings)
    assert KEY not in written + shown + "".join(capsys.readouterr())


def test_with_the_check_off_nothing_of_it_is_declared_and_the_plan_says_so():
    plan = run_program("dev", {NS + "apiKeyCheck": False}, offline_plan=False)
    assert not {(r.type, r.name) for r in plan.registrations} & KEY_OBJECTS
    annotations = plan.one("kubernetes:ray.io/v1:RayService").inputs["metadata"]["annotations"]
    assert annotations["ray-llm-eks/environment"] == "dev"
    assert [w for w in plan.warnings if "apiKeyCheck is false" in w] == [
        "ray-llm-eks:apiKeyCheck is false: the endpoint serves every request that reaches it, without a key "
        "(environment dev)"
    ]
