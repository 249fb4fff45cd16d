"""How a bad stack value is told: one line, from one helper (ray_llm_eks/domain/core/errors.py line), naming the file
where known, the key as the user wrote it, the value as YAML writes it, and what is allowed; an unknown key gets a
"did you mean" and a pointer to docs/configuration.md instead of the list of every key."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

from ray_llm_eks.domain.checks.preflight import PreflightError, check_zones
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import NOT_SHOWN, UNSET, ConfigError, line, yaml_text
from ray_llm_eks.domain.fit import scaling
from ray_llm_eks.domain.platform import prices
from ray_llm_eks.domain.serving import model_table, routing
from ray_llm_eks.domain.telemetry import alerts, slo
from tests.conftest import ROOT, settings_error, settings_of

NS = "ray-llm-eks:"
# file: invalid config key = value: allowed (the value or the file may be missing, never the rest)
ONE_LINE = re.compile(r"^(Pulumi\.\w+\.yaml: )?invalid config [\w:.\[\]-]+( = .+| \(not set\))?: .+$")


def test_the_aws_key_list_is_the_installed_providers():
    """ray_llm_eks/domain/data/provider_config_keys.yaml against pulumi-aws's own SDK (config/vars.py, generated from
    the provider's schema) at the pinned version: a bump that adds or drops a key fails here."""
    entry = config_keys.provider_keys()["aws"]
    pinned = next(ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln.startswith("pulumi-aws=="))
    sdk = importlib.metadata.distribution("pulumi_aws")
    assert pinned == f"pulumi-aws=={entry['version']}" == f"pulumi-aws=={sdk.version}"
    text = sdk.locate_file("pulumi_aws/config/vars.py").read_text()
    assert sorted(entry["keys"]) == sorted(set(re.findall(r"__config__\.get\w*\('(\w+)'", text)))


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("aws:regoin", "did you mean aws:region?"),
        ("aws:profil", "did you mean aws:profile?"),
        ("ray-llm-eks:region", "did you mean aws:region?"),
        ("ray-llm-eks:vpcCdir", "did you mean ray-llm-eks:vpcCidr?"),
        ("ray-llm-eks:routng", "did you mean ray-llm-eks:routing?"),
    ],
)
def test_a_misspelt_key_is_named_as_written_with_the_closest_key(key, suggestion):
    with pytest.raises(ConfigError) as caught:
        config_keys.check_known(key, "Pulumi.dev.yaml")
    message = str(caught.value)
    assert message.startswith(f"Pulumi.dev.yaml: invalid config {key}: not a key of "), message
    assert suggestion in message and message.endswith("keys: docs/configuration.md"), message
    assert len(message) < 200, f"{len(message)} characters: {message}"


def test_a_misspelt_aws_key_is_refused_where_the_region_would_be_blamed():
    """Before, `aws:regoin` passed the stack file and the program said `aws:region = None`."""
    error = settings_error({"aws:region": None, "aws:regoin": "us-east-1"})
    assert "aws:regoin" in str(error) and "did you mean aws:region?" in str(error)
    assert "aws:region (not set)" in str(settings_error({"aws:region": None}))


@pytest.mark.parametrize("key", ["aws:profile", "aws:defaultTags", "aws:assumeRoles", "aws:skipRegionValidation"])
def test_provider_keys_users_set_are_accepted(key):
    config_keys.check_known(key)


def test_other_namespaces_are_left_to_their_owners():
    for key in ("pulumi:tags", "kubernetes:enableServerSideApply", "eks:anything"):
        config_keys.check_known(key)


def test_an_unknown_keys_value_is_never_shown():
    """The key is unknown, so whether its value is a secret is unknown too."""
    assert line("aws:secretKy", NOT_SHOWN, "x") == "invalid config aws:secretKy: x"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "null"),
        (False, "false"),
        (True, "true"),
        ("1.35", "'1.35'"),
        ("yes", "'yes'"),
        ("10.0.0.0/16", "10.0.0.0/16"),
        ("a: b", "'a: b'"),
        (("dev", "staging"), "[dev, staging]"),
        ({"minSize": 2, "maxSize": 1}, "{minSize: 2, maxSize: 1}"),
        (frozenset({"b", "a"}), "[a, b]"),
    ],
)
def test_values_are_written_as_yaml_writes_them(value, shown):
    assert yaml_text(value) == shown
    assert line("natGateways", value, "x") == f"invalid config ray-llm-eks:natGateways = {shown}: x"


def test_an_unset_key_says_so():
    assert line("aws:region", UNSET, "x") == "invalid config aws:region (not set): x"


# Bad values across the modules that parse keys; none may read like Python.
BAD = {
    "apiKeyCheck": {
        NS + "apiKeyCheck": False,
        NS + "environment": "production",
        NS + "endpointPublicAccessCidrs": ["10.1.0.0/16"],
    },
    "environment": {NS + "environment": "prod"},
    "natGateways": {NS + "natGateways": "two"},
    "observability": {NS + "observability": {"storageGiB": "20"}},
    "observabilityMode": {NS + "observability": {"mode": "grafana"}},
    "systemNodes": {NS + "systemNodes": {"instanceType": "m7i.xlarge", "maxSize": "2"}},
    "routing": {NS + "routing": {"prefill": {"policy": "prefix"}}},
    "slo": {NS + "slo": {"ttftMs": True}},
    "modelSpec": {NS + "modelSpec": {"parameters": 9}},
    "kubernetesVersion": {NS + "kubernetesVersion": "1.20"},
    "clusterLogRetentionDays": {NS + "clusterLogRetentionDays": "30d"},
    "unknown key": {NS + "maxModelLenght": 4096},
}
# Python's spellings; a quoted '1.35' is YAML's too (the quotes keep it a string), so reprs are caught by
# their quoted words: ['dev', 'staging'].
PYTHON = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\['[a-z]|\ba (int|str|float|bool|dict)\b")


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_message_is_one_line_in_the_one_format_in_yamls_words(case):
    message = str(settings_error(BAD[case]))
    assert ONE_LINE.fullmatch(message), message
    assert not PYTHON.search(message), message


def test_one_helper_writes_the_line():
    """Every module raises ConfigError (ray_llm_eks/domain/core/errors.py), whose one function `line` writes the text:
    no other module spells the format out."""
    spelled = [
        str(path.relative_to(ROOT))
        for folder in ("ray_llm_eks/domain", "ray_llm_eks/adapters", "offline")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "errors.py" and "invalid config" in path.read_text()
    ]
    assert spelled == []


# Each mapping-valued key of the table, and the names the refusal of a value of another kind must list.
MAPPINGS = {
    "systemNodes": ["instanceType", "minSize", "desiredSize", "maxSize", "diskSizeGiB"],
    "gpuPools": ["prefill", "decode", "collocated", "serves", "instanceType", "maxSize"],
    "replicas": ["prefill", "decode", "collocated"],
    "autoscaling": ["prefill", "decode", "minReplicas", "maxReplicas", "targetOngoingRequests"],
    "routing": ["collocated", "prefill", "policy", "imbalancedThreshold", "matchRateThreshold", "eviction"],
    "observability": ["mode", "retentionDays", "storageGiB"],
    "instanceTypes": ["gpuModel", "gpus", "gpuMemoryMiB", "vcpus", "memoryGiB", "nvmeGb", "efa"],
    "modelSpec": ["parameters", "weightDtype", "kvLayers", "kvHeads", "headDim", "linearLayers"],
    "prices": ["instances", "natGatewayPerHour"],
    "slo": ["ttftMs", "tpotMs"],
    "alerts": ["kvCacheUsage", "gpuMemoryUsage", "waitingMinutes"],
    "eksAddonVersions": ["vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-ebs-csi-driver"],
}


def test_every_mapping_key_is_listed_here():
    assert sorted(MAPPINGS) == sorted(k for k, d in config_keys.declared().items() if "type" not in d)


@pytest.mark.parametrize("key", sorted(MAPPINGS))
def test_a_mapping_key_given_a_scalar_lists_what_it_holds(key):
    message = str(settings_error({NS + key: "on"}))
    assert message.startswith(f"Pulumi.dev.yaml: invalid config {NS}{key} = 'on': a mapping "), message
    assert [name for name in MAPPINGS[key] if name not in message] == [], message


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("routing", {"prefill": "prefixAffinity"}, "routing.prefill"),
        ("routing", {"prefill": {"policy": "prefixAffinity", "eviction": 5}}, "routing.prefill.eviction"),
        ("autoscaling", {"prefill": 3}, "autoscaling.prefill"),
    ],
)
def test_a_nested_mapping_given_a_scalar_lists_its_fields(key, value, field):
    message = str(settings_error({NS + key: value}))
    assert f"{NS}{field} = " in message and ": a mapping with fields [" in message, message


@pytest.mark.parametrize(
    ("parse", "key"),
    [
        (routing.parse, "routing"),
        (scaling.parse_autoscaling, "autoscaling"),
        (prices.price_overrides, "prices"),
        (model_table.spec_from_config, "modelSpec"),
        (slo.parse, "slo"),
        (alerts.parse, "alerts"),
    ],
)
def test_each_parser_refuses_a_scalar_as_the_stack_does(parse, key):
    """The modules check the shape themselves too (callers other than ray_llm_eks/domain/loading/config.py): the same
    line, less the stack file's name, which only the stack adapter knows."""
    with pytest.raises(ConfigError) as caught:
        parse("on")
    assert f"Pulumi.dev.yaml: {caught.value}" == str(settings_error({NS + key: "on"}))


def test_deploy_time_refusals_use_the_same_line():
    """What only AWS can answer (ray_llm_eks/domain/checks/preflight.py) is refused in the same one line."""

    class Aws:
        def zones(self):
            return {"us-east-1c"}

    with pytest.raises(PreflightError) as caught:
        check_zones(settings_of({}), Aws())
    assert str(caught.value) == (
        "invalid config ray-llm-eks:availabilityZones = [us-east-1a, us-east-1b]: zones available to this account "
        "in us-east-1: [us-east-1c]"
    )
