"""The offline harness refuses what the Pulumi CLI refuses, so `make plan` cannot pass where
`pulumi up` would reject the project or a stack's config."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from offline import plan as plan_cli
from offline.mocks import PlanMocks, RecordingMonitor
from offline.plan import run_program
from ray_llm_eks.adapters.stackfile import PROJECT_SCHEMA, StackFileError, load_project, load_stack, stack_names
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.security.hardening import HardeningSettings, security_switches
from tests.conftest import ROOT, STACKS, copy_project, plan_fails, shipped_stacks

SHARED_SCHEMAS = ROOT.parent / "shared" / "schemas"


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "__main__.py", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_every_stack_file_is_found_and_loads():
    assert {"dev", "prod"} <= set(stack_names(ROOT))
    for stack in STACKS:
        assert load_stack(stack, ROOT).values["aws:region"]


def test_project_file_matches_pulumis_schema():
    project = load_project(ROOT)
    assert project["name"] == "ray-llm-eks" and project["runtime"]["name"] == "python"
    # No key declared there: the CLI would require each one without a default on every stack.
    assert "config" not in project


def test_a_key_declared_in_pulumi_yaml_without_default_is_required_like_the_cli(project_copy):
    """pulumi up (CLI v3.274.1, pkg/workspace/config.go mergeConfig) refuses a stack that leaves a
    declared key without a default unset; with a default, the default reaches the program."""
    project = yaml.safe_load((project_copy / "Pulumi.yaml").read_text())
    project["config"] = {"natGateways": {"type": "string", "default": "perAz"}, "clusterName": {"type": "string"}}
    (project_copy / "Pulumi.yaml").write_text(yaml.safe_dump(project))
    with pytest.raises(
        ConfigError, match=r"Pulumi.dev.yaml: invalid config ray-llm-eks:clusterName \(not set\): required"
    ):
        load_stack("dev", root=project_copy)
    config = load_stack("dev", root=project_copy, overrides={"ray-llm-eks:clusterName": "c"})
    assert config.values["ray-llm-eks:natGateways"] == "single"  # the stack's own value wins
    config = load_stack(
        "dev", root=project_copy, overrides={"ray-llm-eks:clusterName": "c", "ray-llm-eks:natGateways": None}
    )
    assert config.values["ray-llm-eks:natGateways"] == "perAz"


@pytest.mark.skipif(not SHARED_SCHEMAS.exists(), reason="../shared is not beside this checkout")
def test_vendored_schemas_equal_the_shared_ones():
    # The project schema is the pinned Pulumi CLI's own: make check-upstream compares it with that version.
    for path in (p for p in SHARED_SCHEMAS.iterdir() if p.name != PROJECT_SCHEMA.name):
        assert (ROOT / "offline" / "schemas" / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_project_file_pulumi_would_refuse_is_refused(project_copy):
    project = yaml.safe_load((project_copy / "Pulumi.yaml").read_text())
    project["config"] = {"vpcCidr": {"type": "map"}}  # Pulumi allows string, integer, boolean, array, object
    (project_copy / "Pulumi.yaml").write_text(yaml.safe_dump(project))
    with pytest.raises(StackFileError, match="project schema at 'config/vpcCidr"):
        load_project(project_copy)


def test_a_key_the_program_does_not_read_is_refused():
    with pytest.raises(
        ConfigError, match=r"Pulumi\.dev\.yaml: invalid config ray-llm-eks:vpcCdir: not a key of this project"
    ):
        load_stack("dev", ROOT, overrides={"ray-llm-eks:vpcCdir": "10.0.0.0/16"})


def test_the_running_program_refuses_a_key_it_does_not_read(monkeypatch):
    """The CLI passes undeclared keys through, so the program itself refuses them at `pulumi up`."""
    from pulumi.runtime import config as runtime_config

    from ray_llm_eks.adapters import stack

    runtime_config.set_all_config({"ray-llm-eks:vpcCidr": "10.0.0.0/16", "aws:profile": "work"})
    assert stack.running_stack().values == {"ray-llm-eks:vpcCidr": "10.0.0.0/16", "aws:profile": "work"}
    runtime_config.set_all_config({"ray-llm-eks:vpcCidr": "10.0.0.0/16", "ray-llm-eks:vpcCdir": "10.0.0.0/16"})
    with pytest.raises(
        ConfigError, match=r"^invalid config ray-llm-eks:vpcCdir: not a key of this project; did you mean"
    ):
        stack.load_settings(stack.running_stack())
    runtime_config.set_all_config({"ray-llm-eks:vpcCidr": "10.0.0.0/16", "aws:regoin": "us-east-1"})
    with pytest.raises(ConfigError, match=r"^invalid config aws:regoin: not a key of the aws provider"):
        stack.load_settings(stack.running_stack())
    runtime_config.set_all_config({})


def test_declared_type_is_enforced_like_the_cli():
    with pytest.raises(ConfigError, match="clusterLogRetentionDays = thirty: a whole number"):
        load_stack("dev", ROOT, overrides={"ray-llm-eks:clusterLogRetentionDays": "thirty"})
    with pytest.raises(ConfigError, match=r"clusterLogRetentionDays = '3\.5': a whole number"):
        load_stack("dev", ROOT, overrides={"ray-llm-eks:clusterLogRetentionDays": "3.5"})
    with pytest.raises(ConfigError, match=r"kubernetesVersion = 1\.35: a string \(YAML reads 1\.35 as a number: quote"):
        load_stack("dev", ROOT, overrides={"ray-llm-eks:kubernetesVersion": 1.35})
    with pytest.raises(ConfigError, match="availabilityZones = us-east-1a: a list of strings"):
        load_stack("dev", ROOT, overrides={"ray-llm-eks:availabilityZones": "us-east-1a"})


def test_other_namespaces_are_not_checked_against_the_project():
    assert load_stack("dev", ROOT, overrides={"aws:profile": "work"}).values["aws:profile"] == "work"


def test_secure_values_are_never_decrypted():
    config = load_stack("dev", ROOT, overrides={"ray-llm-eks:clusterName": {"secure": "v1:abc:def"}})
    assert config.values["ray-llm-eks:clusterName"] == "[secret]"
    assert "ray-llm-eks:clusterName" in config.secret_keys


def test_structured_values_reach_the_program_as_json():
    values = load_stack("dev", ROOT).values
    assert json.loads(values["ray-llm-eks:gpuPools"])["prefill"]["instanceType"] == "g6.8xlarge"
    assert values["ray-llm-eks:kubernetesVersion"] == "1.35"


def test_plan_command_writes_the_files(tmp_path, capsys):
    out = tmp_path / "plan"
    assert plan_cli.main(["--stack", "dev", "--out", str(out)]) == 0
    rows = json.loads((out / "resources.json").read_text())
    assert {tuple(sorted(r)) for r in rows} == {
        ("dependencies", "id", "inputs", "name", "options", "parent", "provider", "remote", "type", "urn")
    }
    assert (out / "manifests").is_dir()
    assert (out / "graph.md").read_text().count("```mermaid") == 1
    printed = capsys.readouterr().out
    assert "Longest dependency chain" in printed and "eks:index:Cluster" in printed


def test_a_plan_skips_the_sdks_source_positions_only_while_it_runs():
    """The SDK builds each registration's source position from a full traceback; nothing offline reads
    it, and it was a quarter of a plan's CPU under pytest. The skip must really be live (an SDK upgrade
    that renames the private function would silently bring the cost back) and end with the plan."""
    from pulumi.runtime import resource as sdk_resource

    frames: list[int] = []

    class Watching(RecordingMonitor):
        def RegisterResource(self, request):
            frames.append(len(request.stackTrace.frames))
            return super().RegisterResource(request)

    sdk_own = sdk_resource._get_stack_trace
    plan_cli.run_program("baseline", monitor=Watching(PlanMocks()))
    assert len(frames) > 10 and set(frames) == {0}
    assert sdk_resource._get_stack_trace is sdk_own


@pytest.mark.parametrize(
    ("overrides_yaml", "expected"),
    [
        ("ray-llm-eks:vpcCidr: 10.0.0.0/33", "invalid config ray-llm-eks:vpcCidr = 10.0.0.0/33: an IPv4 CIDR"),
        (
            "ray-llm-eks:vpcCidrr: 10.0.0.0/16",
            "Pulumi.dev.yaml: invalid config ray-llm-eks:vpcCidrr: not a key of this project; did you mean "
            "ray-llm-eks:vpcCidr? keys: docs/configuration.md",
        ),
        (
            "aws:regoin: us-east-1",
            "Pulumi.dev.yaml: invalid config aws:regoin: not a key of the aws provider (pulumi-aws 7.51.1; this "
            "program reads aws:region); did you mean aws:region? keys: docs/configuration.md",
        ),
    ],
)
def test_plan_command_fails_with_one_clear_message(tmp_path, capsys, monkeypatch, overrides_yaml, expected):
    """A typo in a stack file makes `make plan` fail, naming the key and the bad value."""
    root = tmp_path / "project"
    copy_project(ROOT, root)
    stack_file = root / "Pulumi.dev.yaml"
    doc = yaml.safe_load(stack_file.read_text())
    doc["config"].update(yaml.safe_load(overrides_yaml))
    stack_file.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(plan_cli, "ROOT", root)
    assert plan_cli.main(["--stack", "dev", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_declared_keys_are_exactly_the_keys_the_program_reads():
    """ray_llm_eks/domain/data/config_keys.yaml, ray_llm_eks/domain/loading/config.py and docs/configuration.md agree on
    the config keys."""
    from ray_llm_eks.adapters import botocore_facts
    from ray_llm_eks.domain.loading.config import load_deploy_mode, load_settings

    asked: set[str] = set()
    values = load_stack("dev", ROOT).values

    def get(key: str):
        asked.add(key)
        return values.get(f"ray-llm-eks:{key}")

    load_settings(get, "dev", "us-east-1", botocore_facts.load())
    load_deploy_mode(get)
    declared = set(config_keys.declared())
    assert asked == declared
    reference = (ROOT / "docs" / "configuration.md").read_text()
    assert [key for key in sorted(declared) if f"`{key}`" not in reference] == []


def test_a_secret_key_set_in_plain_text_is_refused():
    with pytest.raises(ConfigError, match=r"hfToken = \(plain text, not shown\): a secret: pulumi config") as caught:
        load_stack("dev", ROOT, overrides={"ray-llm-eks:hfToken": "hf_plain"})
    assert "hf_plain" not in str(caught.value)
    # A key nobody reads may hold a secret too: its value is never shown.
    with pytest.raises(ConfigError) as caught:
        load_stack("dev", ROOT, overrides={"ray-llm-eks:hfTokn": "hf_plain", "aws:secretKy": "aws_plain"})
    assert "plain" not in str(caught.value) and "did you mean ray-llm-eks:hfToken?" in str(caught.value)


def test_secret_manifests_never_carry_values():
    from offline.mocks import Registration
    from offline.plan import Plan

    def secret(name, inputs):
        return Registration(f"urn:{name}", "kubernetes:core/v1:Secret", name, "id", None, [], None, True, False, inputs)

    head = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    plan = Plan(
        "t", [secret("a", {**head, "data": {"k": "cGxhaW4="}}), secret("b", {**head, "stringData": "[secret]"})]
    )
    docs = plan.manifests()
    assert docs["kubernetes_core_v1_Secret--a.yaml"]["data"] == {"k": "[secret]"}
    assert docs["kubernetes_core_v1_Secret--b.yaml"]["stringData"] == "[secret]"


def test_a_users_stack_and_plan_beside_the_shipped_files_stay_out_of_the_suite(tmp_path, monkeypatch, capsys):
    """After `make plan STACK=mine OUT=out` with a stack of the user's in another region, the suite
    plans the shipped stacks only and its project copies hold neither the stack nor the plan."""
    repo = tmp_path / "checkout"
    copy_project(ROOT, repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    dev = (repo / "Pulumi.dev.yaml").read_text()
    (repo / "Pulumi.mine.yaml").write_text(dev.replace("us-east-1", "eu-west-1"))
    monkeypatch.setattr(plan_cli, "ROOT", repo)
    assert plan_cli.main(["--stack", "mine", "--out", str(repo / "out")]) == 0, capsys.readouterr().err
    assert "mine" in stack_names(repo) and "mine" not in shipped_stacks(repo)
    assert shipped_stacks(repo) == STACKS
    copy = tmp_path / "copy"
    copy_project(repo, copy)
    assert not (copy / "Pulumi.mine.yaml").exists() and not (copy / "out").exists()
    assert (copy / "Pulumi.dev.yaml").read_text() == dev


# ---- read as the pinned Pulumi CLI reads it (gopkg.in/yaml.v3; the rules: tests/unit/domain/core/test_pulumi_yaml.py)


def test_a_key_set_twice_is_refused_as_the_cli_refuses_it(project, capsys):
    path = project / "Pulumi.dev.yaml"
    path.write_text(path.read_text() + "  ray-llm-eks:natGateways: perAz\n")
    err = plan_fails(project, capsys)
    assert ": invalid YAML: mapping key 'ray-llm-eks:natGateways' already defined at line 13: " in err, err


def test_a_yaml_1_1_no_is_text_not_false(project, capsys):
    """`networkPolicies: no` turned every NetworkPolicy off (PyYAML's YAML 1.1 read it as false); the CLI
    hands the program the text `no`."""
    path = project / "Pulumi.dev.yaml"
    path.write_text(path.read_text() + "  ray-llm-eks:networkPolicies: no\n")
    err = plan_fails(project, capsys)
    assert err == (
        "error: Pulumi.dev.yaml: invalid config ray-llm-eks:networkPolicies = 'no': true or false "
        "(the Pulumi CLI reads no as the text 'no', not a boolean)\n"
    )


def test_what_pulumi_config_set_writes_without_type_plans_as_the_unquoted_values(project):
    """`pulumi config set maxModelLen 8192` (no --type) writes `maxModelLen: "8192"`: the program is handed the
    same text as for an unquoted 8192, so `make plan` takes it and plans the same."""
    path = project / "Pulumi.dev.yaml"
    base = path.read_text()
    path.write_text(base + '  ray-llm-eks:maxModelLen: "8192"\n  ray-llm-eks:waitForReady: "false"\n')
    quoted = load_stack("dev", root=project).values
    plan_cli.precheck("dev", project)
    path.write_text(base + "  ray-llm-eks:maxModelLen: 8192\n  ray-llm-eks:waitForReady: false\n")
    assert load_stack("dev", root=project).values == quoted
    assert quoted["ray-llm-eks:maxModelLen"] == "8192" and quoted["ray-llm-eks:waitForReady"] == "false"


def test_a_float_in_exponent_form_is_a_number_as_for_the_cli(project):
    """yaml.v3 reads 8.03e9 as a float (PyYAML as the text '8.03e9', which modelSpec refused as not "a number");
    Go's JSON hands it to the program as 8030000000."""
    spec = "{parameters: 8.03e9, weightDtype: bfloat16, kvLayers: 32, kvHeads: 8, headDim: 128, "
    spec += "stateMiBPerSequence: 0, maxContext: 131072}"
    path = project / "Pulumi.dev.yaml"
    path.write_text(
        path.read_text() + f"  ray-llm-eks:modelId: my-org/llama-3.1-8b-ft\n  ray-llm-eks:modelSpec: {spec}\n"
    )
    config = load_stack("dev", root=project)
    assert json.loads(config.values["ray-llm-eks:modelSpec"])["parameters"] == 8_030_000_000
    plan_cli.precheck("dev", project)  # the fit takes it


@pytest.mark.parametrize("key", ["networkPolicies", "apiKeyCheck", "requireEbsEncryption"])
def test_a_security_switch_turned_off_is_said_in_one_line(key):
    plan = run_program("dev", {f"ray-llm-eks:{key}": False})
    said = [w for w in plan.warnings if w.startswith(f"ray-llm-eks:{key} is false: ")]
    assert len(said) == 1 and said[0].endswith("(environment dev)"), plan.warnings
    assert f"warning: ray-llm-eks:{key} is false: " in plan.summary()


def test_every_security_switch_is_a_hardening_field():
    assert set(security_switches()) == {"networkPolicies", "apiKeyCheck", "requireEbsEncryption"}
    for key, field in security_switches().items():
        assert config_keys.declared()[key]["type"] == "boolean" and hasattr(HardeningSettings(), field), key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "Pulumi.dev.yaml is empty: it needs a `config:` mapping with at least aws:region"),
        ("encryptionsalt: v1:abc\n", "Pulumi.dev.yaml has no config: it needs a `config:` mapping"),
        (
            "aws:region: us-east-1\nray-llm-eks:natGateways: single\n",
            "Pulumi.dev.yaml: aws:region is not a field of a stack file (the Pulumi CLI ignores it): config keys "
            "go under `config:` (indented beneath it, as aws:region)",
        ),
        (
            "confg:\n  aws:region: us-east-1\n",
            "confg is not a field of a stack file (the Pulumi CLI ignores it): did you mean config?",
        ),
        ("config: us-east-1\n", "invalid config ray-llm-eks:config = us-east-1: a mapping of keys to values"),
    ],
)
def test_a_stack_file_without_config_says_what_is_wrong(project, capsys, text, expected):
    (project / "Pulumi.dev.yaml").write_text(text)
    err = plan_fails(project, capsys)
    assert expected in err and "aws:region (not set)" not in err, err


def test_a_quoted_number_passes_alone_but_not_inside_a_list():
    """The CLI hands a list over as JSON, where "42" stays a string; alone it is the text 42 either way."""
    from ray_llm_eks.adapters.stackfile import _matches

    assert _matches("integer", None, "42") and _matches("boolean", None, "false")
    assert not _matches("array", {"type": "integer"}, ["42"]) and _matches("array", {"type": "integer"}, [42])
    assert not _matches("array", {"type": "boolean"}, ["true"])
