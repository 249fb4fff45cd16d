"""A new user's everyday mistakes, each made in a copy of the project and run through `make plan`'s
entry point: one line on stderr naming the file or key, the value and what is allowed; no traceback,
nothing written."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offline import plan as plan_cli
from ray_llm_eks.adapters import botocore_facts
from tests.conftest import ROOT, plan_fails
from tests.unit.domain.checks.test_first_hour_rules import LLAMA_2_7B

NS = "ray-llm-eks:"
PD = "pd-disaggregated.yaml"


def edit_stack(project: Path, stack: str = "dev", **config) -> None:
    path = project / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"].update(config)
    path.write_text(yaml.safe_dump(doc))


def edit_pd(project: Path, role: str, **engine_kwargs) -> None:
    """Change engine_kwargs of one side of the PD serve file (kv_transfer_config fields nested)."""
    path = project / "ray_llm_eks" / "serve_configs" / PD
    doc = yaml.safe_load(path.read_text())
    engine = doc["applications"][0]["args"][f"{role}_config"]["engine_kwargs"]
    for key, value in engine_kwargs.items():
        if key.startswith("kv_transfer_config."):
            engine["kv_transfer_config"][key.split(".", 1)[1]] = value
        else:
            engine[key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


# ---- 1. Engine argument values, from vLLM 0.26.0's own definitions


@pytest.mark.parametrize(
    ("role", "change", "expected"),
    [
        ("prefill", {"gpu_memory_utilization": 1.5}, ["gpu_memory_utilization = 1.5", "a number > 0 and <= 1"]),
        (
            "prefill",
            {"kv_transfer_config.kv_role": "kv_prodcer"},
            ["kv_transfer_config.kv_role = kv_prodcer", "one of [kv_producer, kv_both, kv_consumer]"],
        ),
        ("decode", {"max_model_len": "4096"}, ["max_model_len = '4096'", "a whole number >= -1"]),
        ("decode", {"tensor_parallel_size": 0}, ["tensor_parallel_size = 0", "a whole number >= 1"]),
        ("decode", {"language_model_only": "yes"}, ["language_model_only = 'yes'", "true or false"]),
        ("decode", {"kv_cache_dtype": "fp9"}, ["kv_cache_dtype = fp9", "one of [auto, "]),
    ],
)
def test_engine_argument_value_vllm_would_refuse(project, capsys, role, change, expected):
    edit_pd(project, role, **change)
    err = plan_fails(project, capsys)
    assert f"ray_llm_eks/serve_configs/{PD}: invalid config {role} engine_kwargs." in err and "vLLM 0.26.0" in err, err
    for text in expected:
        assert text in err, err


def test_swapped_kv_roles_fail_the_plan(project, capsys):
    """No engine refuses a swapped pair (the PD rehearsal served one), so the plan does."""
    edit_pd(project, "prefill", **{"kv_transfer_config.kv_role": "kv_consumer"})
    edit_pd(project, "decode", **{"kv_transfer_config.kv_role": "kv_producer"})
    err = plan_fails(project, capsys)
    assert (
        f"ray_llm_eks/serve_configs/{PD}: invalid config prefill engine_kwargs.kv_transfer_config.kv_role = kv_consumer"
        in err
    ), err
    assert "kv_producer or kv_both on the prefill side" in err, err


def test_memory_share_above_one_fails_before_the_fit_check(project, capsys):
    """The fit check would pass *because* of 1.5 (more memory than the GPU has): it never gets there."""
    edit_pd(project, "prefill", gpu_memory_utilization=1.5)
    edit_pd(project, "decode", gpu_memory_utilization=1.5)
    err = plan_fails(project, capsys)
    assert "gpu_memory_utilization" in err and "does not fit" not in err


# ---- 2. YAML syntax errors: file, line, column, what is wrong


def test_stack_file_syntax_error(project, capsys):
    path = project / "Pulumi.dev.yaml"
    path.write_text(path.read_text().replace("  ray-llm-eks:natGateways: single", "  ray-llm-eks:natGateways: [single"))
    err = plan_fails(project, capsys)
    assert err.startswith("error: ") and "Pulumi.dev.yaml:" in err and "invalid YAML" in err, err
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "[single" in text)
    assert f"Pulumi.dev.yaml:{line + 1}:" in err, err  # the parser notices on the next line


def test_serve_file_syntax_error(project, capsys):
    path = project / "ray_llm_eks" / "serve_configs" / PD
    path.write_text(path.read_text().replace("kv_role: kv_producer", "kv_role: kv_producer: x"))
    err = plan_fails(project, capsys)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "kv_producer: x" in text)
    assert f"{PD}:{line}:" in err and "mapping values are not allowed here" in err, err


# ---- 3. A key in a namespace nobody reads


def test_key_in_a_misspelt_namespace_is_refused(project, capsys):
    edit_stack(project, **{"ray-llm-ek:maxModelLen": 8192})
    err = plan_fails(project, capsys)
    assert "invalid config ray-llm-ek:maxModelLen: namespace ray-llm-ek is read by nobody;" in err, err
    assert (
        "did you mean ray-llm-eks:maxModelLen? namespaces: [ray-llm-eks, aws, eks, kubernetes, pulumi, random]" in err
    )


def test_provider_namespaces_are_accepted(project, capsys):
    edit_stack(
        project, **{"aws:profile": "work", "pulumi:tags": {"team": "ml"}, "kubernetes:enableServerSideApply": True}
    )
    assert plan_cli.main(["--stack", "dev", "--out", str(project / "out")]) == 0


# ---- 8. Idle GPU nodes; 9. a gated model planned before its token exists


def test_pool_larger_than_its_replicas_warns():
    from offline.plan import run_program

    plan = run_program("prod", {NS + "replicas": {"prefill": 2, "decode": 1}})
    (warning,) = _besides_api_keys(plan.warnings)
    assert warning.startswith("gpuPools.decode.desiredSize = 2: 1 decode replica(s)") and "1 would run idle" in warning
    assert "warning: gpuPools.decode.desiredSize = 2" in plan.summary()


def _besides_api_keys(warnings: list[str]) -> list[str]:
    """Every shipped stack warns that apiKeys is unset (a secret no stack file can ship), every PD stack
    of a known upstream bug it can only be warned of (tests/unit/domain/checks/test_known_issues.py holds which),
    and prod of its documentation range for the office network (tests/unit/domain/checks/test_placeholders.py)."""
    shipped = ("apiKeys is not set: ", "known issue ", "endpointPublicAccessCidrs = 203.0.113.0/24: ")
    return [w for w in warnings if not w.startswith(shipped)]


def test_shipped_prod_uses_every_gpu_node(plans):
    assert _besides_api_keys(plans["prod"].warnings) == []


def test_gated_model_plans_without_a_token_and_warns():
    from offline.plan import run_program

    plan = run_program("dev", {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct", NS + "maxModelLen": 8192})
    (warning,) = _besides_api_keys(plan.warnings)
    assert "hfToken" in warning and "is gated" in warning and "`pulumi up` will refuse" in warning
    assert plan.one("kubernetes:ray.io/v1:RayService")


# ---- 6. A user's own stack: a copy of dev in another region


def test_a_copy_of_dev_in_another_region_plans(project, capsys, plans):
    """A copy of dev in us-west-2 (complete node, NAT and gp3 prices) plans with a total once the stack
    prices its load balancer (priced for us-east-1 only); in eu-west-1, which offered no g6 when its
    prices were taken, the cost table names each missing price, and the stack's own `prices` complete it."""
    dev = (project / "Pulumi.dev.yaml").read_text()
    out = project / "plan-mine"
    oregon = dev.replace("us-east-1", "us-west-2")
    (project / "Pulumi.mine.yaml").write_text(oregon)
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "us-west-2 on-demand" in printed and (out / "resources.json").exists()
    assert (
        "total: unknown; at least 4.42 $/h (~3,228 $/month) without the 2 missing prices: internal load balancer "
        "(NLB), NLB capacity units (budget) (set prices.loadBalancerPerHour, prices.loadBalancerLcuPerHour in "
        "the stack)"
    ) in printed
    nlb = "  ray-llm-eks:prices:\n    loadBalancerPerHour: 0.0225\n    loadBalancerLcuPerHour: 0.006\n"
    (project / "Pulumi.mine.yaml").write_text(oregon + nlb)
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    # us-west-2's table has us-east-1's prices for these types: the same total as dev.
    assert f"total: {plans['dev'].outputs['estimatedHourlyCostUsd']:.2f} $/h" in capsys.readouterr().out

    ireland = dev.replace("us-east-1", "eu-west-1")
    (project / "Pulumi.mine.yaml").write_text(ireland)
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "missing prices: decode nodes g6.8xlarge, prefill nodes g6.8xlarge" in printed
    # Each missing price by the `prices` field that sets it, an instance type once for both pools.
    assert "(set prices.instances.g6.8xlarge, prices.loadBalancerPerHour, prices.loadBalancerLcuPerHour in" in printed
    (project / "Pulumi.mine.yaml").write_text(ireland + nlb + "    instances: {g6.8xlarge: 2.5}\n")
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    assert re.search(r"total: [\d.]+ \$/h", capsys.readouterr().out)


# ---- 10. Plans are byte-identical for identical input


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_plans_of_the_same_stack_are_byte_identical(tmp_path, capsys):
    for name in ("a", "b"):
        assert plan_cli.main(["--stack", "prod", "--out", str(tmp_path / name)]) == 0
    capsys.readouterr()
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b and len(a) > 5
    serve = next(v for k, v in a.items() if k.endswith(".serveConfigV2.yaml"))
    assert yaml.safe_load(serve)["applications"][0]["import_path"] == "prefill_guard:build_pd_app"  # PD, guarded


# ---- 13. The OpenAI Python client after `make up`


def test_openai_python_example_is_python_with_the_endpoint_and_model(plans):
    example = plans["dev"].outputs["openaiPythonExample"]
    compile(example, "openaiPythonExample", "exec")
    assert 'base_url="http://localhost:8000/v1"' in example and 'model="Qwen/Qwen3.5-9B"' in example
    assert 'api_key=os.environ["OPENAI_API_KEY"]' in example  # one of the stack's apiKeys
    readme = (ROOT / "README.md").read_text()
    client = next(line for line in example.splitlines() if line.startswith("client = "))
    assert client in readme, "the README shows the same snippet"


# ---- 12. modelSpec for a model outside the table, from its config.json


def test_hf_model_spec_output_plans(tmp_path, capsys):
    from offline.plan import run_program
    from tools.model_spec import main

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_2_7B))
    assert main([str(tmp_path / "config.json")]) == 0
    pasted = yaml.safe_load(capsys.readouterr().out)
    assert pasted[NS + "modelSpec"]["parameters"] == 6_738_415_616
    plan = run_program("dev", {NS + "modelId": "meta-llama/Llama-2-7b-hf", **pasted})
    assert plan.one("kubernetes:ray.io/v1:RayService")


def test_at_pulumi_up_a_mistake_is_one_line_without_a_stack_trace():
    """Under the Pulumi CLI (no offline-plan marker) the program raises pulumi.RunError, which the
    CLI reports as its message alone ("a clean exit rather than the usual verbose unhandled error
    logic", pulumi/errors.py)."""
    import pulumi

    from offline.plan import run_program

    with pytest.raises(pulumi.RunError) as caught:
        run_program("dev", {NS + "modelId": "meta-llama/Llama-3.1-8B-Instruct"}, offline_plan=None)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("invalid config ray-llm-eks:hfToken (not set)")


def test_plan_never_replaces_a_directory_that_is_not_a_plan(tmp_path, capsys):
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    assert plan_cli.main(["--stack", "dev", "--out", str(tmp_path)]) == 2
    assert "is not a plan directory" in capsys.readouterr().err and keep.read_text() == "mine"


def test_plan_out_naming_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    assert plan_cli.main(["--stack", "dev", "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: OUT={afile}: Not a directory") and "Traceback" not in err
    assert afile.read_text() == "mine"


def test_at_pulumi_up_a_serve_file_syntax_error_is_one_line(project):
    import pulumi

    from offline.plan import run_program

    path = project / "ray_llm_eks" / "serve_configs" / PD
    path.write_text(path.read_text().replace("kv_role: kv_producer", "kv_role: kv_producer: x"))
    with pytest.raises(pulumi.RunError, match=rf"{PD}:\d+:\d+: invalid YAML: mapping values are not allowed here"):
        run_program("dev", offline_plan=None)


def test_front_end_arguments_are_engine_kwargs_too(project, capsys):
    """Ray Serve LLM hands FrontendArgs keys to vLLM's OpenAI front end: accepted, values checked."""
    edit_pd(project, "decode", enable_auto_tool_choice="yes")
    err = plan_fails(project, capsys)
    assert "decode engine_kwargs.enable_auto_tool_choice = 'yes'" in err and "true or false" in err, err


def test_a_mistake_costs_under_two_seconds_of_cpu_from_a_fresh_process(project):
    """The whole `make plan` path in a new interpreter, imports included. CPU seconds, not wall: the
    figure holds whatever else the machine is doing (wall equals it on an idle machine)."""
    serve = project / "ray_llm_eks" / "serve_configs" / PD
    serve.write_text(serve.read_text().replace("gpu_memory_utilization: 0.92", "gpu_memory_utilization: 1.5", 1))
    code = "import sys; from offline import plan; plan.ROOT = __import__('pathlib').Path(sys.argv[1]); "
    code += "from ray_llm_eks.domain.serving import serve_config; "
    code += "serve_config.SERVE_CONFIG_DIR = plan.ROOT / 'ray_llm_eks' / 'serve_configs'; "
    code += "sys.exit(plan.main(['--stack', 'dev', '--out', sys.argv[2]]))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, "-c", code, str(project), str(project / "out")]
    run = subprocess.run(argv, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "gpu_memory_utilization = 1.5" in run.stderr
    assert cpu < 2, f"{cpu:.2f} CPU seconds"


def test_botocore_facts_are_read_once_per_botocore_version(tmp_path, monkeypatch):
    """The cache file holds exactly what botocore's models say, and a later run reads the file."""
    monkeypatch.delenv("RAY_LLM_EKS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    botocore_facts.load.cache_clear()
    fresh = botocore_facts.read_botocore()
    assert botocore_facts.load() == botocore_facts.as_facts(fresh)
    assert botocore_facts.cache_file().parent == tmp_path / "ray-llm-eks"
    assert json.loads(botocore_facts.cache_file().read_text()) == fresh
    assert "p5.48xlarge" in fresh["ec2_instance_types"] and 3653 in fresh["log_retention_days"]

    def botocore_must_not_be_read():
        raise AssertionError("read botocore again although its facts are cached")

    monkeypatch.setattr(botocore_facts, "read_botocore", botocore_must_not_be_read)
    botocore_facts.load.cache_clear()
    assert botocore_facts.load() == botocore_facts.as_facts(fresh)
    botocore_facts.load.cache_clear()


# ---- 11. A serve config of the user's own, beside the stack file


def test_a_serve_config_of_ones_own_beside_the_stack_file_plans_and_is_checked(project, capsys):
    """The installed package's user has no serve_configs/ to edit: serveConfig names a file beside the stack file,
    rendered and checked as the shipped ones are (its mistakes one line naming it)."""
    own = (project / "ray_llm_eks" / "serve_configs" / "collocated.yaml").read_text()
    (project / "my-serve.yaml").write_text(own.replace("max_model_len: 4096", "max_model_len: 2048"))
    stack = (
        (project / "Pulumi.baseline.yaml").read_text().replace("serveConfig: collocated", "serveConfig: my-serve.yaml")
    )
    (project / "Pulumi.mine.yaml").write_text(stack)
    out = project / "plan-mine"
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    served = yaml.safe_load(next((out / "manifests").glob("*RayService*.serveConfigV2.yaml")).read_text())
    (config,) = served["applications"][0]["args"]["llm_configs"]
    assert config["engine_kwargs"]["max_model_len"] == 2048 and config["engine_kwargs"]["tool_call_parser"]
    capsys.readouterr()
    (project / "my-serve.yaml").write_text(own.replace("gpu_memory_utilization", "gpu_memory_utilisation"))
    err = plan_fails(project, capsys, "mine")
    assert err.startswith("error: my-serve.yaml: invalid config collocated engine_kwargs.gpu_memory_utilisation:")
    assert "did you mean gpu_memory_utilization?" in err
