"""The components as an installable package (pyproject.toml [project]): a wheel built from the files git
tracks, installed apart from the checkout, renders a stack's RayService and builds the components' Args
from its own files alone (ray_llm_eks/domain/data, serve_configs, serve_ingress found beside its modules); and the
Pulumi component package (PulumiPlugin.yaml, ray_llm_eks/): its schema as Pulumi's host infers it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict
from pathlib import Path

import jsonschema
import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.adapters.environment import CACHE_ENV, cache_dir
from ray_llm_eks.adapters.stackfile import load_stack, project_schema
from ray_llm_eks.domain.serving import api_keys
from tests.conftest import ROOT, copy_project

# Run in the installed copy: the dev stack's values in, its Args (and where their modules came from) out.
PROBE = """
import json, sys
from ray_llm_eks.adapters import stack
from ray_llm_eks.adapters.stackfile import StackConfig, project_schema
from ray_llm_eks.domain.serving import api_keys
import ray_llm_eks.components.llm_service, ray_llm_eks.stack_args
from ray_llm_eks import provider
from importlib.resources import files

given = json.loads(sys.stdin.read())
config = StackConfig(given["project"], given["stack"], given["values"], frozenset())
settings = stack.load_settings(config)
args = ray_llm_eks.stack_args.llm_service_args(settings, None, None, None, [])
print(json.dumps({
    "module": ray_llm_eks.components.llm_service.__file__,
    "path": sys.path,
    "spec": args.ray_service_spec,
    "model_id": args.model_id,
    "ingress": sorted(api_keys.ingress_sources()),
    "schema": provider.schema() == json.loads(files("ray_llm_eks").joinpath("schema.json").read_text()),
    "project_schema": project_schema(),
}))
"""


def _args(config) -> dict:
    import ray_llm_eks.stack_args

    settings = stack.load_settings(config)
    built = ray_llm_eks.stack_args.llm_service_args(settings, None, None, None, [])
    return asdict(built)


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's wheel, built from the files git tracks. About 10 s, most of it pip's isolated build
    environment (setuptools and wheel from the index)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source, wheels = tmp / "source", tmp / "wheels"
    copy_project(ROOT, source)
    subprocess.run([*PIP, "wheel", "--no-deps", "-w", str(wheels), str(source)], check=True, cwd=tmp)
    (built,) = wheels.glob("ray_llm_eks-*.whl")
    return built


def test_a_wheel_installed_apart_from_the_checkout_builds_the_same_args(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    # The Python example names this wheel by its path (its requirements.txt works wherever the folder is copied).
    example = ROOT / "examples" / "pd-service-on-my-cluster" / "requirements.txt"
    named = [line for line in example.read_text().splitlines() if line and not line.startswith("#")]
    assert named == [f"./wheels/{wheel.name}"]
    subprocess.run([*PIP, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, cwd=tmp_path)
    # One name in site-packages, so a consumer's own `components` or `domain` package cannot collide with ours.
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == ["ray_llm_eks"]

    config = load_stack("dev", ROOT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONPATH": str(target), CACHE_ENV: str(cache_dir())}  # botocore's facts: the cache already made
    given = json.dumps({"project": config.project, "stack": config.stack, "values": config.values})
    ran = subprocess.run(
        [sys.executable, "-c", PROBE], input=given, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert ran.returncode == 0, ran.stderr
    installed = json.loads(ran.stdout)

    assert Path(installed["module"]).is_relative_to(target)
    assert not any((tmp_path / p).resolve() == ROOT for p in installed["path"])  # "" is its cwd
    here = _args(config)
    assert installed["spec"] == json.loads(json.dumps(here["ray_service_spec"]))
    assert installed["model_id"] == here["model_id"]
    assert installed["ingress"] == sorted(api_keys.ingress_sources())
    assert installed["schema"]  # the component package's schema ships with it, and matches its Args
    assert installed["project_schema"] == project_schema()  # Pulumi's project schema too, for a folder of any user


# Run by the installed wheel's interpreter in a copy of the Python example (offline/ is not in the wheel): Pulumi's
# mocks in place of the engine, and an audit hook recording every path the program opens or lists.
EXAMPLE_DRIVER = """
import json, os, runpy, sys

paths = []


def audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        paths.append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(audit)
import pulumi
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

specs = []


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        if args.typ == "kubernetes:ray.io/v1:RayService":
            specs.append(args.inputs["spec"])
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):
        return {}


pulumi.runtime.set_mocks(Mocks(), project="pd-service-on-my-cluster", stack="dev", preview=False)
_sync_await(run_pulumi_func(lambda: runpy.run_path("__main__.py", run_name="__main__")))
import ray_llm_eks

groups = [[g["groupName"] for g in s["rayClusterConfig"]["workerGroupSpecs"]] for s in specs]
print(json.dumps({"package": ray_llm_eks.__file__, "worker_groups": groups, "paths": paths}))
"""


def test_the_installed_wheel_plans_the_python_example(wheel: Path, tmp_path: Path):
    """The wheel in a venv of its own, outside the checkout, with its dependencies found through a .pth naming this
    interpreter's site-packages (a path line: no .pth of the checkout's venv runs), plans the Python example from a
    copy of its folder under `python -I`; no module of the package opens or lists a path of the checkout. About 5 s."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--target", str(purelib), str(wheel)], check=True)
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    example = tmp_path / "example"
    shutil.copytree(ROOT / "examples" / "pd-service-on-my-cluster", example)
    (example / "driver.py").write_text(EXAMPLE_DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    env[CACHE_ENV] = str(cache_dir())  # botocore's facts: the cache already made
    ran = subprocess.run(
        [str(python), "-I", "driver.py"], capture_output=True, text=True, cwd=example, env=env, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    planned = json.loads(ran.stdout.strip().splitlines()[-1])

    assert Path(planned["package"]).is_relative_to(purelib)
    assert planned["worker_groups"] == [["prefill", "decode"]]

    def of_checkout(path: Path) -> bool:
        return path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / ".venv")

    read = [path for path in map(Path, planned["paths"]) if of_checkout(path) or of_checkout(path.resolve())]
    assert read == [], f"the installed package read the checkout: {read[:5]}"


def test_the_package_names_the_drawn_components_and_imports_none_of_them_until_asked():
    """`from ray_llm_eks import LlmService` is the component's own class; `import ray_llm_eks` alone imports no
    module of the package (the standard-library-only tools, the policy pack among them, import single modules)."""
    import ray_llm_eks

    code = "import sys, ray_llm_eks; print(' '.join(sorted(m for m in sys.modules if m.startswith('ray_llm_eks'))))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert ran.stdout.split() == ["ray_llm_eks"]
    for name in ray_llm_eks.__all__:
        public = getattr(ray_llm_eks, name)
        assert (public.__name__, public.__module__.rpartition(".")[0]) == (name, "ray_llm_eks.components")
    with pytest.raises(AttributeError):
        ray_llm_eks.Settings  # noqa: B018 (not a public name)


def test_the_checked_in_schema_is_the_one_the_component_provider_host_infers():
    """Pulumi's own inference (the call the host makes at start), offline: an Args field changed without
    schema.json (`make docs` writes it) fails here, as a consumer's `pulumi package add` would see it."""
    from ray_llm_eks import provider

    checked_in = json.loads((Path(provider.__file__).parent / provider.SCHEMA_FILE).read_text())
    assert provider.schema() == checked_in, "ray_llm_eks/schema.json is stale: `make docs` writes it"
    # What a YAML program relies on: plain inputs it may leave out, and the two it must give.
    service = checked_in["resources"]["ray-llm-eks:index:LlmService"]
    assert service["requiredInputs"] == []  # gpuPools or rayServiceSpec: the Args' check says which is missing
    pools = service["inputProperties"]["gpuPools"]
    assert pools["type"] == "array" and pools["items"]["$ref"] == "#/types/ray-llm-eks:index:GpuPoolInput"
    assert checked_in["types"]["ray-llm-eks:index:GpuPoolInput"]["required"] == ["instanceType", "name"]
    assert service["inputProperties"]["hfToken"].get("plain") is None  # an Output (a secret) may be given


def test_the_package_serves_every_component_the_readme_draws():
    """Each box of the README's diagram names a hosted component by its first word: the package other languages add
    is the design the README shows, no box left to the Python package alone."""
    import re

    from ray_llm_eks import provider

    diagram = re.search(r"```mermaid\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL).group(1)
    drawn = {box.group(1) for box in re.finditer(r'^\s*\w+\["(\w+)', diagram, re.MULTILINE)}
    # The README names the monitoring box by what it gives (Observability), the class by what it installs.
    drawn = {{"Observability": "MonitoringStack"}.get(name, name) for name in drawn}
    assert {component.__name__ for component in provider.HOSTED} == drawn
    schema = json.loads((Path(provider.__file__).parent / provider.SCHEMA_FILE).read_text())
    assert set(schema["resources"]) == {f"{provider.PACKAGE}:index:{name}" for name in drawn}


def test_a_hosted_component_gets_its_inputs_as_a_dict_and_checks_them_like_the_stack_keys():
    """The host passes the Args' fields as a dict (component.py map_inputs); a bad one is the stack's line."""
    import pytest

    from ray_llm_eks import provider
    from ray_llm_eks.domain.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        provider.LlmService("llm", {"ray_service_spec": {}, "model_id": "m", "namespace": "default"})
    taken = "a namespace of its own, not one of [default, kuberay-system]"
    assert str(refused.value) == f"LlmServiceArgs: invalid config namespace = default: {taken}"


def _refusal(make) -> str:
    import pytest

    from ray_llm_eks.domain.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        make()
    return str(refused.value)


def test_each_args_refuses_a_bad_field_with_the_stack_keys_line():
    """One line each, the rule the stack key of the same value has (ray_llm_eks/domain/platform/field_checks.py)."""
    from ray_llm_eks.components.device_plugins import DevicePluginsArgs
    from ray_llm_eks.components.kuberay import KubeRayOperatorArgs
    from ray_llm_eks.components.llm_service import LlmServiceArgs

    spec = {"rayClusterConfig": {"workerGroupSpecs": [{"groupName": "prefill"}]}}
    assert _refusal(lambda: KubeRayOperatorArgs(chart_version="latest")) == (
        "KubeRayOperatorArgs: invalid config chart_version = latest: an exact version of the kuberay-operator chart,"
        " such as 1.7.0"
    )
    assert _refusal(lambda: DevicePluginsArgs(efa_instance_types=["p5.48xlarge"])).startswith(
        "DevicePluginsArgs: invalid config efa_image_repository = null: "
    )
    assert _refusal(lambda: LlmServiceArgs(spec, "m", service_name="Llm")) == (
        "LlmServiceArgs: invalid config service_name = Llm: a DNS-1035 label of at most 47 characters"
    )
    assert _refusal(lambda: LlmServiceArgs(spec, "m", ready_timeout_seconds=60)).endswith(
        "ready_timeout_seconds = 60: 600 to 14400 (image pull + weights + engine start)"
    )
    assert _refusal(lambda: LlmServiceArgs({}, "m")).startswith("LlmServiceArgs: invalid config ray_service_spec = {}")
    assert _refusal(lambda: LlmServiceArgs(spec, "m", redis_address="rediss://x:6379")).startswith(
        "LlmServiceArgs: invalid config redis_password = null"
    )
    assert _refusal(lambda: LlmServiceArgs(spec, "m", ingress_modules=["os.py"])).startswith(
        "LlmServiceArgs: invalid config ingress_modules = [os.py]: modules of ["
    )
    assert LlmServiceArgs(spec, "m", ingress_modules=["selective_pd.py"]).ingress_modules == ["selective_pd.py"]
    # None reads as the default (a YAML program leaves the field out); the defaults are the stack keys'.
    assert LlmServiceArgs(spec, "m", namespace=None).namespace == "llm"


POOLS = {"prefill": {"instanceType": "g6.8xlarge"}, "decode": {"instanceType": "g6.8xlarge"}}


def test_llm_service_renders_from_typed_inputs_what_the_stack_keys_of_the_same_values_render():
    """gpu_pools, region, serve_config and the rest are the stack's keys under the Args' names: the spec, the served
    model and the pods' modules are those of a stack on an existing cluster with the same values."""
    from ray_llm_eks.components.llm_service import GpuPoolInput, LlmServiceArgs
    from ray_llm_eks.domain.render.ray_service import ray_service_spec

    pools = [GpuPoolInput(name, pool["instanceType"]) for name, pool in POOLS.items()]
    args = LlmServiceArgs(
        gpu_pools=pools, region="eu-west-1", environment="dev", api_key_check=True, max_model_len=8192
    )
    keys = {"aws:region": "eu-west-1", "ray-llm-eks:existingCluster": "true", "ray-llm-eks:environment": "dev",
            "ray-llm-eks:maxModelLen": "8192", "ray-llm-eks:gpuPools": json.dumps(POOLS)}  # fmt: skip
    settings = stack.load_settings(stack.StackConfig("ray-llm-eks", "stack", keys, frozenset()))
    assert args.ray_service_spec == ray_service_spec(settings)
    assert args.model_id == settings.serving.serve_document.model_id == "Qwen/Qwen3.5-9B"
    assert args.ingress_modules == api_keys.SHIPPED_MODULES
    assert "max_model_len: 8192" in args.ray_service_spec["serveConfigV2"]
    # collocated: one pool, and what it serves decides the modules the pods import
    one = LlmServiceArgs(gpu_pools=[GpuPoolInput("collocated", "g6.8xlarge", max_size=2)], region="us-east-1",
                         serve_config="collocated", environment="dev", api_key_check=False)  # fmt: skip
    groups = one.ray_service_spec["rayClusterConfig"]["workerGroupSpecs"]
    assert [(g["groupName"], g["maxReplicas"]) for g in groups] == [("collocated", 2)]


def test_llm_service_refuses_typed_inputs_by_the_args_names():
    """The stack's rules refuse them, in one line that names the field the caller gave (not the stack key)."""
    from ray_llm_eks.components.llm_service import GpuPoolInput, LlmServiceArgs

    pools = [GpuPoolInput(name, pool["instanceType"]) for name, pool in POOLS.items()]
    assert _refusal(lambda: LlmServiceArgs(model_id="m")) == (
        "LlmServiceArgs: invalid config gpu_pools = null: one of gpu_pools (the component renders the RayService) and"
        " ray_service_spec (one rendered already)"
    )
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=pools)).startswith("LlmServiceArgs: invalid config region = null")
    assert _refusal(lambda: LlmServiceArgs({"a": 1}, gpu_pools=pools, region="us-east-1")).startswith(
        "LlmServiceArgs: invalid config ray_service_spec = given with gpu_pools: one of"
    )
    bad_type = [GpuPoolInput("prefill", "m5.large"), pools[1]]
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=bad_type, region="us-east-1")).startswith(
        "LlmServiceArgs: invalid config gpu_pools.prefill.instance_type = m5.large: an instance type with NVIDIA GPUs"
    )
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=pools[:1], region="us-east-1")).startswith(
        "LlmServiceArgs: invalid config gpu_pools = [prefill]: exactly the pools"
    )
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=pools, region="us-east-1", image="mine/ray:1")) == (
        "LlmServiceArgs: invalid config ray_version (not set): set image and ray_version together: ray_version must"
        " equal the image's Ray"
    )
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=pools, region="us-east-1", serve_config="mine.yaml")) == (
        "LlmServiceArgs: invalid config serve_config = mine.yaml: a shipped serving application, one of [collocated,"
        " data-parallel, pd-disaggregated, pd-xpyd, tensor-parallel]"
    )
    assert _refusal(lambda: LlmServiceArgs(gpu_pools=pools, region="us-east-1", max_model_len=3)) == (
        "LlmServiceArgs: invalid config max_model_len = 3: a context length in tokens, 16 or more"
    )


def test_a_refused_input_reaches_the_engine_as_a_bad_property_without_a_traceback():
    """The engine shows an InputPropertyError as `property <path> has a problem: <reason>`; any other error of a
    component's constructor the SDK reports with the constructor's Python traceback."""
    import pytest
    from pulumi.errors import InputPropertyError

    from ray_llm_eks import provider

    host = provider.hosted_provider()
    pools = [{"name": "prefill", "instanceType": "m5.large"}, {"name": "decode", "instanceType": "g6.8xlarge"}]
    with pytest.raises(InputPropertyError) as refused:
        host.construct("llm", "ray-llm-eks:index:LlmService", {"region": "us-east-1", "gpuPools": pools})
    assert refused.value.property_path == "gpuPools.prefill.instanceType"
    assert refused.value.reason.startswith("LlmServiceArgs: invalid config gpu_pools.prefill.instance_type = m5.large")
    with pytest.raises(InputPropertyError) as refused:
        host.construct("kuberay", "ray-llm-eks:index:KubeRayOperator", {"chartVersion": "latest"})
    assert refused.value.property_path == "chartVersion"


def test_the_provider_makes_the_nested_pool_inputs_typed():
    """The host hands gpuPools as a list of dicts keyed by the fields' names, every number a double."""
    from ray_llm_eks import provider
    from ray_llm_eks.components.llm_service import GpuPoolInput, LlmServiceArgs

    given = {"region": "us-east-1", "gpu_pools": [{"name": "prefill", "instance_type": "g6.8xlarge", "max_size": 2.0},
                                                  {"name": "decode", "instance_type": "g6.8xlarge"}]}  # fmt: skip
    args = provider._args(LlmServiceArgs, given)
    assert args.gpu_pools == [GpuPoolInput("prefill", "g6.8xlarge", max_size=2), GpuPoolInput("decode", "g6.8xlarge")]
    assert isinstance(args.gpu_pools[0].max_size, int)


SCHEMA_TYPES = {"string": str, "boolean": bool, "integer": int, "number": (int, float), "object": dict, "array": list}


def test_the_yaml_example_uses_the_schema_s_components_inputs_and_outputs():
    """examples/pd-service-yaml against ray_llm_eks/schema.json: each resource a hosted component, each
    property an input of it (of its type where written literally), every required input given, each
    output one the component has. Running it needs Pulumi YAML's language host, which this checkout does
    not build."""
    import re

    import yaml

    from ray_llm_eks import provider

    program = yaml.safe_load((ROOT / "examples" / "pd-service-yaml" / "Pulumi.yaml").read_text())
    schema = json.loads((Path(provider.__file__).parent / provider.SCHEMA_FILE).read_text())
    jsonschema.validate(program, project_schema())  # a project the CLI takes (ray_llm_eks/adapters/data)
    assert program["packages"] == {provider.PACKAGE: "../.."}  # the checkout, PulumiPlugin.yaml at its root
    components = {}
    for name, resource in program["resources"].items():
        component = schema["resources"][resource["type"]]
        components[name] = component
        given = resource.get("properties", {})
        assert set(given) <= set(component["inputProperties"]), name
        assert set(component.get("requiredInputs", [])) <= set(given), name
        for key, value in given.items():
            if not (isinstance(value, str) and value.startswith("${")):
                assert isinstance(value, SCHEMA_TYPES[component["inputProperties"][key]["type"]]), key
    for value in program["outputs"].values():
        resource, output = re.fullmatch(r"\$\{(\w+)\.(\w+)\}", value).groups()
        assert output in components[resource]["properties"], value


def test_network_args_refuse_a_bad_layout_with_the_stack_keys_line():
    """The VPC's checks are the stack keys' (ray_llm_eks/domain/platform/field_checks.py); the zones default from the
    region."""
    from ray_llm_eks.components.network import NetworkArgs

    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", vpc_cidr="172.17.0.0/16")) == (
        "NetworkArgs: invalid config vpc_cidr = 172.17.0.0/16: a block that does not overlap 172.17.0.0/16"
        " (Docker bridge)"
    )
    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", vpc_cidr="8.8.0.0/16")).endswith(
        "vpc_cidr = 8.8.0.0/16: a private (RFC 1918) block with prefix /16 to /20"
    )
    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", ["us-west-2a", "us-west-2b"])).endswith(
        "availability_zones = [us-west-2a, us-west-2b]: zones of region us-east-1, such as us-east-1a"
    )
    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", ["us-east-1a"])).endswith(
        "2 or 3 distinct zones (the EKS control plane needs two)"
    )
    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", gpu_availability_zone="us-east-1c")) == (
        "NetworkArgs: invalid config gpu_availability_zone = us-east-1c: one of availabilityZones"
        " [us-east-1a, us-east-1b]"
    )
    assert _refusal(lambda: NetworkArgs("ray-llm", "us-east-1", nat_gateways="none")).endswith(
        "nat_gateways = none: one of [single, perAz]"
    )
    assert _refusal(lambda: NetworkArgs("1st", "us-east-1")).startswith(
        "NetworkArgs: invalid config cluster_name = 1st"
    )
    network = NetworkArgs("ray-llm", "us-east-1", vpc_cidr=None)
    assert (network.availability_zones, network.gpu_availability_zone) == (("us-east-1a", "us-east-1b"), "us-east-1a")
    assert (network.vpc_cidr, network.nat_gateways) == ("10.0.0.0/16", "single")


def test_cluster_autoscaler_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscalerArgs

    assert _refusal(lambda: ClusterAutoscalerArgs("ray-llm", "us-east-1", kubernetes_version="1.29")) == (
        "ClusterAutoscalerArgs: invalid config kubernetes_version = '1.29': one of ['1.34', '1.35', '1.36']"
    )
    assert _refusal(lambda: ClusterAutoscalerArgs("ray-llm", "us-east-1", chart_version="latest")).endswith(
        "chart_version = latest: an exact version of the cluster-autoscaler chart, such as 9.59.0"
    )
    assert _refusal(lambda: ClusterAutoscalerArgs("ray_llm!", "us-east-1")).startswith(
        "ClusterAutoscalerArgs: invalid config cluster_name = ray_llm!"
    )
    scaler = ClusterAutoscalerArgs("ray-llm", "us-east-1", kubernetes_version=None)
    assert (scaler.kubernetes_version, scaler.chart_version) == ("1.35", "9.59.0")


def test_internal_endpoint_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.load_balancer import InternalEndpointArgs

    assert _refusal(lambda: InternalEndpointArgs(["0.0.0.0/0"])) == (
        "InternalEndpointArgs: invalid config source_ranges = 0.0.0.0/0: a network narrower than the whole internet"
    )
    assert _refusal(lambda: InternalEndpointArgs(["10.0.0.1/16"])).endswith(
        "source_ranges = 10.0.0.1/16: CIDR blocks such as 10.0.0.0/16"
    )
    assert _refusal(lambda: InternalEndpointArgs([])).endswith("at least one CIDR (who may call the internal endpoint)")
    assert _refusal(lambda: InternalEndpointArgs(["10.0.0.0/16"], namespace="kube-system")).startswith(
        "InternalEndpointArgs: invalid config namespace = kube-system"
    )
    assert _refusal(lambda: InternalEndpointArgs(["10.0.0.0/16"], pod_subnets=["10.0.0.0/18"])) == (
        "InternalEndpointArgs: invalid config source_ranges = 10.0.0.0/16: CIDR blocks outside the pod subnets "
        "[10.0.0.0/18] (pods get in through serveClientNamespaces)"
    )
    assert _refusal(lambda: InternalEndpointArgs(["10.0.128.0/17"], pod_subnets=["10.0.0.1/18"])).endswith(
        "pod_subnets = 10.0.0.1/18: CIDR blocks such as 10.0.0.0/16"
    )
    endpoint = InternalEndpointArgs(["10.0.0.0/16"], service_name=None)
    assert (endpoint.source_ranges, endpoint.namespace, endpoint.service_name) == (("10.0.0.0/16",), "llm", "llm")


def test_gcs_store_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.gcs_store import GcsStoreArgs

    assert _refusal(lambda: GcsStoreArgs("ray-llm", "vpc-1", ["subnet-1"], node_type="t4g.small")) == (
        "GcsStoreArgs: invalid config node_type = t4g.small: an ElastiCache node type such as cache.t4g.small"
    )
    assert _refusal(lambda: GcsStoreArgs("ray-llm", "vpc-1", ["subnet-1"], replicas=6)).endswith(
        "replicas = 6: 0 to 5 read replicas beside the primary"
    )
    assert _refusal(lambda: GcsStoreArgs("ray-llm", "vpc-1", [])).endswith("at least one private subnet id")
    store = GcsStoreArgs("ray-llm", "vpc-1", ["subnet-1"], replicas=None)
    assert (store.node_type, store.replicas) == ("cache.t4g.small", 1)


def test_observability_args_refuse_a_bad_field_with_the_stack_keys_line():
    """The monitoring's checks are the `observability` key's (ray_llm_eks/domain/telemetry/observability.py), one line
    each."""
    from ray_llm_eks.components.observability import EbsCsiDriverArgs, MonitoringStackArgs, ServiceMonitoringArgs

    assert _refusal(lambda: EbsCsiDriverArgs("ray-llm", "us-east-1", kubernetes_version="1.29")) == (
        "EbsCsiDriverArgs: invalid config kubernetes_version = '1.29': one of ['1.34', '1.35', '1.36']"
    )
    assert _refusal(lambda: MonitoringStackArgs("ray-llm", "us-east-1", "us-east-1a", mode="external")) == (
        "MonitoringStackArgs: invalid config mode = external: one of [embedded, amp]"
    )
    assert _refusal(lambda: MonitoringStackArgs("ray-llm", "us-east-1", "us-east-1a", retention_days=0)).endswith(
        "retention_days = 0: 1 to 3650 days"
    )
    assert _refusal(lambda: MonitoringStackArgs("ray-llm", "us-east-1", "us-east-1a", storage_gib=10)).startswith(
        "MonitoringStackArgs: invalid config storage_gib = 10: 11 to 16384 GiB: 15 days of 100,000 series"
    )
    assert _refusal(
        lambda: MonitoringStackArgs("ray-llm", "us-east-1", "us-east-1a", dcgm_chart_version="latest")
    ).endswith("dcgm_chart_version = latest: an exact version of the dcgm-exporter chart, such as 4.8.2")
    assert _refusal(lambda: ServiceMonitoringArgs(prometheus_release="-kps")) == (
        "ServiceMonitoringArgs: invalid config prometheus_release = -kps: a label value"
    )
    assert _refusal(lambda: ServiceMonitoringArgs(namespace="default")).startswith(
        "ServiceMonitoringArgs: invalid config namespace = default"
    )
    stack = MonitoringStackArgs("ray-llm", "us-east-1", "us-east-1a", mode=None, storage_gib=None)
    assert (stack.mode, stack.retention_days, stack.storage_gib, stack.stack_chart_version) == (
        "embedded",
        15,
        20,
        "88.5.3",
    )
    assert ServiceMonitoringArgs(prometheus_release=None).prometheus_release == "kube-prometheus-stack"


def test_load_balancer_controller_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.load_balancer import LoadBalancerControllerArgs

    assert _refusal(lambda: LoadBalancerControllerArgs("ray-llm", "us-east-1", "vpc-1", chart_version="latest")) == (
        "LoadBalancerControllerArgs: invalid config chart_version = latest: an exact version of the"
        " aws-load-balancer-controller chart, such as 3.5.0"
    )
    assert _refusal(lambda: LoadBalancerControllerArgs("-lb", "us-east-1", "vpc-1")).startswith(
        "LoadBalancerControllerArgs: invalid config cluster_name = -lb"
    )
    assert LoadBalancerControllerArgs("ray-llm", "us-east-1", "vpc-1", chart_version=None).chart_version == "3.5.0"


def test_existing_cluster_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.existing_cluster import ExistingClusterArgs

    spec = {"rayClusterConfig": {"workerGroupSpecs": [{"groupName": "decode"}]}}
    assert _refusal(lambda: ExistingClusterArgs(spec, ["decode"], kube_context=" ")) == (
        "ExistingClusterArgs: invalid config kube_context = ' ': a context name of the kubeconfig, or unset"
    )
    assert _refusal(lambda: ExistingClusterArgs(spec, ["decode"], kuberay_namespace="ray-system")) == (
        "ExistingClusterArgs: invalid config kuberay_namespace = ray-system: only with install_kuberay: false"
        " (ours runs in kuberay-system)"
    )
    assert _refusal(
        lambda: ExistingClusterArgs(spec, ["decode"], install_kuberay=False, kuberay_namespace="default")
    ).startswith("ExistingClusterArgs: invalid config kuberay_namespace = default: a namespace of the operator's own")
    checked = ExistingClusterArgs(spec, ["decode"], install_kuberay=None, offline_plan=None)
    assert (checked.install_kuberay, checked.install_device_plugins, checked.offline_plan) == (True, True, False)


# Where a cluster goes (the Network's outputs) and what a GPU pool joins (the Cluster's): the Args keep them as given.
VPC = {"vpc_id": "vpc-1", "private_subnet_ids": ["subnet-a", "subnet-b"], "public_subnet_ids": ["subnet-c"],
       "system_subnet_id": "subnet-a"}  # fmt: skip
NODES_TARGET = {"cluster": "eks", "node_role": "role", "subnet_id": "subnet-a"}


def test_cluster_and_node_group_args_refuse_a_bad_field_with_the_stack_keys_line():
    """The cluster's and its node groups' checks are the stack keys' (ray_llm_eks/domain/platform/field_checks.py)."""
    from ray_llm_eks.components.cluster import ClusterArgs, NodeGroupArgs

    assert _refusal(lambda: NodeGroupArgs("m7i.xlarge", min_size=2, desired_size=1, max_size=3)) == (
        "NodeGroupArgs: invalid config desired_size = {min_size: 2, desired_size: 1, max_size: 3}:"
        " min_size <= desired_size <= max_size"
    )
    assert _refusal(lambda: NodeGroupArgs("m7i.xlarge", max_size=0, min_size=0)) == (
        "NodeGroupArgs: invalid config max_size = 0: at least 1 (EKS rejects a node group with max_size 0)"
    )
    assert _refusal(lambda: NodeGroupArgs("m7i.xlarge", disk_size_gib=10)).endswith(
        "disk_size_gib = 10: 20 to 16384 GiB (gp3 root volume)"
    )
    assert _refusal(lambda: NodeGroupArgs("m7i.xlarge", min_size="1")) == (
        "NodeGroupArgs: invalid config min_size = '1': a count of 0 or more"
    )
    assert _refusal(lambda: NodeGroupArgs("m7i")).startswith("NodeGroupArgs: invalid config instance_type = m7i:")
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **VPC, service_cidr="10.0.0.0/8")).endswith(
        "service_cidr = 10.0.0.0/8: a private (RFC 1918) block with prefix /12 to /24"
    )
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **VPC, public_access_cidrs=[])).endswith(
        "public_access_cidrs = []: at least one CIDR (pulumi reaches the API)"
    )
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **VPC, log_retention_days=2)).startswith(
        "ClusterArgs: invalid config log_retention_days = 2: one of [1, 3, 5"
    )
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **VPC, log_types=["kernel"])).startswith(
        "ClusterArgs: invalid config log_types = kernel: EKS log types [api, audit"
    )
    assert _refusal(
        lambda: ClusterArgs(
            "ray-llm", "us-east-1", **VPC, admin_principal_arns=["arn:aws-cn:iam::123456789012:role/ci"]
        )
    ).endswith("(not an sts assumed-role ARN)")
    small = NodeGroupArgs("m7i.xlarge", disk_size_gib=50)
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **VPC, system_nodes=small)).startswith(
        "ClusterArgs: invalid config system_nodes.disk_size_gib = 50: at least 90 GiB"
    )
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **{**VPC, "private_subnet_ids": "subnet-a"})) == (
        "ClusterArgs: invalid config private_subnet_ids = subnet-a: at least one private subnet id"
    )
    assert _refusal(lambda: ClusterArgs("ray-llm", "us-east-1", **{**VPC, "public_subnet_ids": []})).endswith(
        "public_subnet_ids = []: at least one public subnet id"
    )
    cluster = ClusterArgs("ray-llm", "us-east-1", **VPC, kubernetes_version=None, system_nodes=None)
    assert cluster.kubernetes_version == "1.35" and cluster.public_access_cidrs == ("0.0.0.0/0",)
    nodes = cluster.system_nodes
    assert (nodes.instance_type, nodes.min_size, nodes.desired_size, nodes.max_size) == ("m7i.xlarge", 1, 1, 1)
    assert nodes.disk_size_gib == 150  # ray_llm_eks/domain/platform/sizing.py SYSTEM_DISK_GIB


def test_gpu_node_pool_args_refuse_a_bad_field_with_the_stack_keys_line():
    from ray_llm_eks.components.cluster import NodeGroupArgs
    from ray_llm_eks.components.gpu_nodes import GpuNodePoolArgs
    from ray_llm_eks.components.node_template_tags import NodeTemplateTagsArgs

    g6 = NodeGroupArgs("g6.8xlarge", min_size=0, max_size=2)
    assert _refusal(lambda: GpuNodePoolArgs(g6, "us-east-1a", **NODES_TARGET)).startswith(
        "GpuNodePoolArgs: invalid config ami_release_version (not set): exactly one of ami_release_version"
    )
    assert _refusal(lambda: GpuNodePoolArgs(g6, "us-east-1a", **NODES_TARGET, ami_id="ami-1")) == (
        "GpuNodePoolArgs: invalid config ami_id = ami-1: an AMI id such as ami-0123456789abcdef0"
    )
    assert _refusal(
        lambda: GpuNodePoolArgs(NodeGroupArgs("m7i.xlarge"), "us-east-1a", **NODES_TARGET, ami_id=None)
    ).startswith("GpuNodePoolArgs: invalid config nodes.instance_type = m7i.xlarge: an instance type with NVIDIA GPUs")
    assert _refusal(lambda: NodeTemplateTagsArgs("prefill", "g6.4xlarge", efa=True)).startswith(
        "NodeTemplateTagsArgs: invalid config instance_type = g6.4xlarge: a GPU instance type with EFA"
    )
    assert _refusal(lambda: NodeTemplateTagsArgs("-prefill", "g6.8xlarge")).startswith(
        "NodeTemplateTagsArgs: invalid config pool_name = -prefill: a label value"
    )
    pool = GpuNodePoolArgs(
        g6, "us-east-1a", **NODES_TARGET, ami_release_version="v20261112", efa=None, kubernetes_version=None
    )
    assert (pool.nodes.desired_size, pool.nodes.disk_size_gib, pool.efa, pool.scales) == (1, 100, False, True)


def test_component_inputs_take_a_whole_float_as_int():
    """The engine hands the provider every number as a double: YAML's `readyTimeoutSeconds: 3600` arrives as
    3600.0 and must reach LlmServiceArgs as the int 3600; 3600.5 stays refused."""
    import pytest

    from ray_llm_eks import provider
    from ray_llm_eks.components.llm_service import LlmServiceArgs
    from ray_llm_eks.domain.core.errors import ConfigError

    spec = {"rayClusterConfig": {"workerGroupSpecs": [{"groupName": "decode"}]}}
    given = {"model_id": "Qwen/Qwen3.5-9B", "ray_service_spec": spec, "api_key_check": False}
    args = provider._args(LlmServiceArgs, {**given, "ready_timeout_seconds": 3600.0})
    assert args.ready_timeout_seconds == 3600 and type(args.ready_timeout_seconds) is int
    with pytest.raises(ConfigError):
        provider._args(LlmServiceArgs, {**given, "ready_timeout_seconds": 3600.5})


def test_every_args_with_a_region_refuses_one_botocore_does_not_know():
    """Each Args naming a region checks it by the stack key's rule (field_checks.check_region): the partition it
    gives names policies and trust, so an unknown one must not reach an ARN."""
    from ray_llm_eks.components.cluster import ClusterArgs
    from ray_llm_eks.components.cluster_autoscaler import ClusterAutoscalerArgs
    from ray_llm_eks.components.karpenter import KarpenterArgs
    from ray_llm_eks.components.load_balancer import LoadBalancerControllerArgs
    from ray_llm_eks.components.network import NetworkArgs
    from ray_llm_eks.components.observability import EbsCsiDriverArgs

    made = {
        "ClusterArgs": lambda region: ClusterArgs("ray-llm", region, **VPC),
        "ClusterAutoscalerArgs": lambda region: ClusterAutoscalerArgs("ray-llm", region),
        "KarpenterArgs": lambda region: KarpenterArgs("ray-llm", region, [], []),
        "LoadBalancerControllerArgs": lambda region: LoadBalancerControllerArgs("ray-llm", region, "vpc-1"),
        "NetworkArgs": lambda region: NetworkArgs("ray-llm", region),
        "EbsCsiDriverArgs": lambda region: EbsCsiDriverArgs("ray-llm", region),
    }
    for name, make in made.items():
        line = _refusal(lambda make=make: make("us-est-1"))
        assert line.startswith(f"{name}: invalid config region = us-est-1: an AWS region botocore knows ("), line
        assert line.endswith("; did you mean us-east-1 or us-west-1?"), line
        assert make("eu-west-1").region == "eu-west-1"
