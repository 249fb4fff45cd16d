"""Stack files read as the pinned Pulumi CLI reads them (gopkg.in/yaml.v3 v3.0.1 under sdk/v3
go/common/encoding/marshal.go), not as PyYAML's YAML 1.1 does; and values handed to the program as the
CLI's text of them (Go's encoding/json for numbers). The CLI itself reads the same files in .ci/run
(e2e/cli_stack.py)."""

from __future__ import annotations

import math

import pytest

from ray_llm_eks.adapters.stackfile import _raw_string
from ray_llm_eks.domain.core.yaml_files import YamlSyntaxError, parse, parse_pulumi


@pytest.mark.parametrize(
    ("text", "cli", "pyyaml"),
    [
        ("no", "no", False),  # YAML 1.1 booleans are text to yaml.v3 (resolve.go resolveMap: only true/false)
        ("yes", "yes", True),
        ("on", "on", True),
        ("Off", "Off", False),
        ("True", True, True),
        ("FALSE", False, False),
        ("8.03e9", 8.03e9, "8.03e9"),  # yamlStyleFloat: no dot or exponent sign needed
        ("1e3", 1000.0, "1e3"),
        ("0o17", 15, "0o17"),  # YAML 1.2 octal
        ("0777", 511, 511),  # strconv.ParseInt base 0: a leading 0 is octal
        ("0x1F", 31, 31),
        ("-0b11", -3, -3),
        ("1_000", 1000, 1000),
        ("08", 8.0, "08"),  # not octal, not an int: yamlStyleFloat
        ("1:30", "1:30", 90),  # no base 60
        ("~", None, None),
        (".5", 0.5, 0.5),
        ("2026-01-02", "2026-01-02", "date"),
        ("'no'", "no", "no"),
        ("'8.03e9'", "8.03e9", "8.03e9"),
    ],
)
def test_plain_scalars_resolve_as_yaml_v3_does(text, cli, pyyaml):
    assert parse_pulumi(f"k: {text}\n", "f")["k"] == cli
    seen = parse(f"k: {text}\n", "f")["k"]
    assert (type(seen).__name__ == pyyaml) if pyyaml == "date" else seen == pyyaml  # where the two readers differ


def test_infinities_and_nan_resolve_as_floats():
    doc = parse_pulumi("a: .inf\nb: -.Inf\nc: .NaN\n", "f")
    assert doc["a"] == math.inf and doc["b"] == -math.inf and math.isnan(doc["c"])


def test_a_key_twice_in_one_mapping_is_refused_naming_both_lines():
    text = "config:\n  ray-llm-eks:natGateways: single\n  aws:region: us-east-1\n  ray-llm-eks:natGateways: perAz\n"
    with pytest.raises(YamlSyntaxError) as caught:
        parse_pulumi(text, "Pulumi.dev.yaml")
    assert str(caught.value) == (
        "Pulumi.dev.yaml:4:3: invalid YAML: mapping key 'ray-llm-eks:natGateways' already defined at line 2: "
        "the Pulumi CLI refuses the file; keep one"
    )
    assert parse(text, "f")["config"]["ray-llm-eks:natGateways"] == "perAz"  # PyYAML: the last one wins, silently
    nested = "config:\n  ray-llm-eks:gpuPools:\n    prefill: {minSize: 1, minSize: 2}\n"
    with pytest.raises(YamlSyntaxError, match="mapping key 'minSize' already defined at line 3"):
        parse_pulumi(nested, "f")
    assert parse_pulumi("a: {x: 1}\nb: {x: 1}\n", "f") == {"a": {"x": 1}, "b": {"x": 1}}  # one key per mapping


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (8.03e9, "8030000000"),  # Go's encoding/json: no exponent below 1e21, no trailing .0
        (0.92, "0.92"),
        (2.0, "2"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (0.0, "0"),
        (True, "true"),
        (3, "3"),
        ("no", "no"),
        ({"b": [1, 2.0, None], "a": "x"}, '{"a": "x", "b": [1, 2, null]}'),
    ],
)
def test_values_reach_the_program_as_the_clis_text(value, text):
    assert _raw_string(value) == text
