"""The checks of the entries that copy Pulumi's behaviour or use its private API: the CLI's config rules and
replaceOnChanges (Go modules), the Python SDK's private names (installed), pulumi-policy's analyzer (wheel)."""

from __future__ import annotations

import ast
import json

from tools.upstream import ROOT
from tools.upstream.context import Context, fingerprints, go_versions
from tools.upstream.sources import GoModule, Installed, Wheel, pinned, python_symbol


def check_pulumi_cli_config(ctx: Context) -> list[str]:
    version = go_versions()["pulumi"]
    pkg = ctx.source(GoModule, "github.com/pulumi/pulumi/pkg/v3", version)
    sdk = ctx.source(GoModule, "github.com/pulumi/pulumi/sdk/v3", version)
    entry = "pulumi-cli-config"
    problems = fingerprints(entry, ctx, pkg, {"workspace/config.go": ["validateStackConfigValue", "mergeConfig"]}, "go")
    problems += fingerprints(entry, ctx, sdk, {"go/common/workspace/project.go": ["ValidateConfigValue"]}, "go")
    theirs = json.loads(sdk.read("go/common/workspace/project.json"))
    ours = json.loads((ROOT / "ray_llm_eks" / "adapters" / "data" / "pulumi-project.schema.json").read_text())
    if theirs != ours:
        problems.append(
            f"ray_llm_eks/adapters/data/pulumi-project.schema.json differs from {sdk}: "
            "go/common/workspace/project.json (copy it over, then make test)"
        )
    return problems


def check_pulumi_replace_on_changes(ctx: Context) -> list[str]:
    version = go_versions()["pulumi"]
    pkg = ctx.source(GoModule, "github.com/pulumi/pulumi/pkg/v3", version)
    sdk = ctx.source(GoModule, "github.com/pulumi/pulumi/sdk/v3", version)
    entry = "pulumi-replace-on-changes"
    return fingerprints(entry, ctx, pkg, {"resource/deploy/step_generator.go": ["applyReplaceOnChanges"]}, "go") + (
        fingerprints(entry, ctx, sdk, {"go/common/resource/properties_path.go": ["Contains"]}, "go")
    )


def _missing_attributes(pairs: dict[str, list[str]]) -> list[str]:
    import importlib

    problems = []
    for module, names in pairs.items():
        try:
            found = importlib.import_module(module)
        except ImportError as err:
            problems.append(f"{module}: {err}")
            continue
        for name in names:
            target = found
            for part in name.split("."):
                target = getattr(target, part, None)
            if target is None:
                problems.append(f"{module}.{name} is gone")
    return problems


# The SDK's private names offline/plan.py and offline/mocks.py use (presence; the plan tests use them all).
PULUMI_SDK_PRIVATE = {
    "pulumi.runtime.sync_await": ["_sync_await", "_ensure_event_loop"],
    "pulumi.runtime.settings": [
        "SETTINGS.rpc_manager.clear",
        "SETTINGS.outputs",
        "SETTINGS.lock",
        "ROOT",
        "get_root_resource",
    ],
    "pulumi.runtime.resource": ["_get_stack_trace"],
    "pulumi.runtime.proto.source_pb2": ["StackTrace"],
    "pulumi.runtime.proto.resource_pb2": ["RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES"],
    "pulumi.runtime.stack": ["run_pulumi_func"],
    "pulumi.runtime.mocks": [
        "MockMonitor.ResourceRegistration",
        "MockMonitor.make_urn",
        "MockMonitor.GetDeploymentInfo",
        "MockMonitor.SupportsFeature",
    ],
}
PULUMI_RUNTIME_CONFIG = {
    "pulumi.runtime.config": ["CONFIG.get", "get_config_env", "set_all_config", "get_config", "is_config_secret"]
}


def check_pulumi_sdk_private(ctx: Context) -> list[str]:
    ctx.source(Installed, "pulumi", pinned("requirements.txt", "pulumi"))
    return _missing_attributes(PULUMI_SDK_PRIVATE)


def check_pulumi_runtime_config(ctx: Context) -> list[str]:
    ctx.source(Installed, "pulumi", pinned("requirements.txt", "pulumi"))
    return _missing_attributes(PULUMI_RUNTIME_CONFIG)


def check_pulumi_policy_servicer(ctx: Context) -> list[str]:
    wheel = ctx.source(Wheel, "pulumi_policy", pinned("policy/requirements.txt", "pulumi_policy"))
    text = wheel.read("pulumi_policy/policy.py")
    try:
        init = ast.parse(python_symbol(text, "_PolicyAnalyzerServicer.__init__")).body[0]
        python_symbol(text, "_PolicyAnalyzerServicer.Analyze")
        python_symbol(text, "_PolicyAnalyzerServicer.AnalyzeStack")
    except LookupError as err:
        return [f"{wheel}: pulumi_policy/policy.py: {err}"]
    params = [a.arg for a in init.args.args][1:5]
    if params != ["name", "version", "policies", "enforcement_level"]:
        return [f"{wheel}: _PolicyAnalyzerServicer({', '.join(params)}): policy/sdk_check.py passes four positionally"]
    return fingerprints(
        "pulumi-policy-servicer",
        ctx,
        wheel,
        {"pulumi_policy/policy.py": ["_PolicyAnalyzerServicer.__init__"]},
        "python",
    )
