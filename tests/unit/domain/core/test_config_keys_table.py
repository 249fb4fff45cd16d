"""ray_llm_eks/domain/data/config_keys.yaml is the one table of the stack keys: each entry is well formed, the
default it states is the one the program applies, and docs/configuration.md is generated from it."""

from __future__ import annotations

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.cluster.deploy_mode import EXISTING_ONLY
from ray_llm_eks.domain.core import config_keys
from tests.conftest import ROOT
from tools import config_docs

NS = "ray-llm-eks:"
FIELDS = {"type", "items", "secret", "default", "default_text", "description", "when_off"}
WITH_DEFAULT = sorted(k for k in config_keys.declared() if config_keys.has_default(k))


def test_each_entry_has_a_type_the_cli_knows_a_description_and_no_other_field():
    for key, entry in config_keys.declared().items():
        assert set(entry) <= FIELDS, key
        assert entry.get("type", "string") in {"string", "integer", "boolean", "array"}, key
        assert entry["description"].strip(), key
        if entry.get("secret"):
            assert "default" not in entry, f"{key}: a secret has no default in a file"


def _loaded(key: str, value) -> tuple:
    """Settings and deploy mode of the dev stack with `key` set to `value` (None: left out). Keys of
    existing-cluster mode are read in that mode; `environment` with a listed API CIDR, which every
    environment but dev requires."""
    overrides = {NS + key: value}
    if key in EXISTING_ONLY:
        overrides[NS + "existingCluster"] = True
    if key == "environment":
        overrides[NS + "endpointPublicAccessCidrs"] = ["198.51.100.0/24"]
    config = stack.stack_file("dev", ROOT, overrides=overrides)
    settings = stack.load_settings(config)
    return settings, settings.deploy_mode


@pytest.mark.parametrize("key", WITH_DEFAULT)
def test_the_tables_default_is_what_the_program_applies(key):
    """Leaving a key out and setting it to the table's default give the same Settings and mode."""
    assert _loaded(key, None) == _loaded(key, config_keys.default(key))


def test_a_default_written_in_code_as_well_is_refused():
    """A constant default lives only in the table: code that passes its own for such a key fails."""
    from ray_llm_eks.domain.core.raw_config import RawConfig

    raw = RawConfig({}.get)
    assert raw.text("natGateways") == config_keys.default("natGateways")
    with pytest.raises(AssertionError, match=r"natGateways: its default is in config_keys\.yaml"):
        raw.text("natGateways", "single")


def test_configuration_docs_are_generated_from_the_table():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == config_docs.render(), "docs/configuration.md is stale: run `make docs`"
