"""Keys by default: a stack without apiKeys gets one generated at deploy time, the key check is off only
where the stack says so and only in environment dev (ray_llm_eks/domain/security/hardening.py,
ray_llm_eks/domain/loading/config.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.facts import SECRET_MARKER
from ray_llm_eks.domain.loading.config import secret_checks
from ray_llm_eks.domain.render.ray_service import ray_service_spec, served_document
from tests.conftest import ROOT

NS = "ray-llm-eks:"


def _settings(name: str = "dev", **overrides):
    return stack.load_settings(stack.stack_file(name, ROOT, overrides={NS + k: v for k, v in overrides.items()}))


def test_the_check_is_on_unless_the_stack_turns_it_off():
    assert _settings().hardening.api_key_check is True
    assert _settings(apiKeyCheck=False).hardening.api_key_check is False


@pytest.mark.parametrize("environment", ["staging", "production"])
def test_the_check_may_be_off_only_in_environment_dev(environment):
    with pytest.raises(ConfigError) as error:
        _settings(environment=environment, endpointPublicAccessCidrs=["203.0.113.0/24"], apiKeyCheck=False)
    assert str(error.value).startswith(
        f"Pulumi.dev.yaml: invalid config ray-llm-eks:apiKeyCheck = false: true in environment {environment}"
    )
    assert "allowed only in [dev]" in str(error.value)


def test_deploying_without_keys_goes_on_and_planning_says_where_the_generated_key_is():
    settings = _settings()
    assert not settings.api_keys_set
    assert secret_checks(settings, deploying=True) == []
    (warning,) = secret_checks(settings, deploying=False)
    assert warning.startswith("apiKeys is not set: `pulumi up` generates one key, a secret (pulumi stack output apiKey")
    assert "\n" not in warning


def test_with_keys_or_with_the_check_off_deploying_goes_on():
    assert secret_checks(replace(_settings(), api_keys_set=True), deploying=True) == []
    (warning,) = secret_checks(_settings(apiKeyCheck=False), deploying=True)
    assert warning.startswith("ray-llm-eks:apiKeyCheck is false: the endpoint serves every request")


def test_a_key_given_as_a_secret_counts_as_set():
    config = stack.stack_file("dev", ROOT)
    keyed = replace(config, values={**config.values, NS + "apiKeys": SECRET_MARKER})
    assert stack.load_settings(keyed).api_keys_set


def test_with_the_check_off_the_spec_serves_the_stacks_own_document_and_mounts_nothing():
    settings = _settings(apiKeyCheck=False)
    assert served_document(settings) == settings.serving.serve_document
    spec = ray_service_spec(settings)
    cluster = spec["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        assert "api-keys" not in {v["name"] for v in pod.get("volumes", [])}
        assert "api-keys" not in {m["name"] for m in pod["containers"][0].get("volumeMounts", [])}
    assert ray_service_spec(_settings())["serveConfigV2"] != spec["serveConfigV2"]
