"""ray_llm_eks/adapters/stack.py: what the running program reads from Pulumi's config, and what reaches
ray_llm_eks/domain/."""

from __future__ import annotations

import pytest
from pulumi.runtime import config as runtime_config

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.core.facts import SECRET_MARKER
from tests.conftest import ROOT


@pytest.fixture
def engine_config():
    def given(values: dict[str, str], secret: list[str]) -> None:
        runtime_config.set_all_config(values, secret)

    yield given
    runtime_config.set_all_config({}, [])


def test_the_running_stack_holds_no_secret_in_plain_text(engine_config):
    engine_config(
        {"ray-llm-eks:hfToken": "hf_plain", "ray-llm-eks:vpcCidr": "10.0.0.0/16", "aws:region": "us-east-1"},
        ["ray-llm-eks:hfToken"],
    )
    config = stack.running_stack()
    assert config.values == {
        "ray-llm-eks:hfToken": SECRET_MARKER,
        "ray-llm-eks:vpcCidr": "10.0.0.0/16",
        "aws:region": "us-east-1",
    }
    assert config.secret_keys == frozenset({"ray-llm-eks:hfToken"})


def test_a_secret_given_in_plain_text_reaches_domain_as_the_marker_only(monkeypatch):
    """A test's SecretValue is handed to the program in plain text (as the CLI decrypts it); Settings
    still sees only that it is set."""
    from ray_llm_eks.adapters.stackfile import SecretValue

    config = stack.stack_file("dev", ROOT, overrides={"ray-llm-eks:hfToken": SecretValue("hf_plain")})
    assert config.values["ray-llm-eks:hfToken"] == "hf_plain"
    asked: dict[str, str | None] = {}
    real = stack.config.load_settings

    def spy(get, *args):
        asked["hfToken"] = get("hfToken")
        return real(get, *args)

    monkeypatch.setattr(stack.config, "load_settings", spy)
    settings = stack.load_settings(config)
    assert asked == {"hfToken": SECRET_MARKER} and settings.hf_token_set


def test_a_bad_value_read_from_a_stack_file_names_the_file_and_one_handed_over_does_not():
    """make plan reads Pulumi.<stack>.yaml and names it in every line; at `pulumi up` the engine hands the values
    over (maybe from an ESC environment, not the file), so the line names the key alone."""
    from dataclasses import replace

    from ray_llm_eks.adapters import stack as stack_adapter
    from ray_llm_eks.domain.core.errors import ConfigError

    read = stack_adapter.stack_file("dev", ROOT, overrides={"ray-llm-eks:systemNodes": {"instanceType": "m7i.xlarg"}})
    for config, prefix in ((read, "Pulumi.dev.yaml: "), (replace(read, file=None), "")):
        with pytest.raises(ConfigError) as refused:
            stack_adapter.load_settings(config)
        assert str(refused.value).startswith(
            f"{prefix}invalid config ray-llm-eks:systemNodes.instanceType = m7i.xlarg: an instance type"
        ), str(refused.value)
