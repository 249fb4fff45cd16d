"""The checks of the entries on metrics and monitoring: the engines' metric names as vLLM and Ray declare them,
the exported-metrics list, Ray's generated dashboards, the Prometheus Operator's CRDs and the Prometheus build."""

from __future__ import annotations

import re
import subprocess
import sys

from tools.upstream import ROOT
from tools.upstream.context import Context, fingerprints, pinned_ray, pinned_vllm
from tools.upstream.sources import GoModule


def check_prometheus_operator_crds(ctx: Context) -> list[str]:
    problems = []
    for ours in sorted((ROOT / "offline" / "schemas").glob("monitoring.coreos.com_*.yaml")):
        name, version = re.match(r"(.+)\.(v[\d.]+)\.yaml$", ours.name).groups()
        module = ctx.source(GoModule, "github.com/prometheus-operator/prometheus-operator", version)
        if module.read(f"example/prometheus-operator-crd/{name}.yaml") != ours.read_text():
            problems.append(f"offline/schemas/{ours.name} differs from {module}: example/prometheus-operator-crd")
    return problems


def check_vllm_ray_metric_names(ctx: Context) -> list[str]:
    """Every vLLM metric ray_llm_eks/domain/telemetry/ray_metrics.py names is still declared by the pinned vLLM (as
    `vllm:<name>`), every Serve metric by the pinned Ray, and the functions that shape them (name sanitising, a
    counter's
    first increment, histogram sums as bucket midpoints) are the ones we read."""
    from ray_llm_eks.domain.telemetry import ray_metrics

    vllm, ray = pinned_vllm(ctx), pinned_ray(ctx)
    declared = vllm.read("vllm/v1/metrics/loggers.py") + vllm.read(
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"
    )
    problems = []
    for name in ray_metrics.VLLM_NAMES:
        if f'"vllm:{name}"' not in declared:
            problems.append(f"{vllm}: no metric vllm:{name} (ray_llm_eks/domain/telemetry/ray_metrics.py)")
    serve = ray.read("ray/serve/_private/replica.py")
    for name in ray_metrics.SERVE_NAMES:
        if f'"{name}"' not in serve:
            problems.append(f"{ray}: ray/serve/_private/replica.py declares no {name}")
    entry = "vllm-ray-metric-names"
    wrappers = {
        "vllm/v1/metrics/ray_wrappers.py": [
            "RayCounterWrapper.inc",
            "RayPrometheusMetric._get_sanitized_opentelemetry_name",
        ]
    }
    recorder = {
        "ray/_private/telemetry/open_telemetry_metric_recorder.py": [
            "OpenTelemetryMetricRecorder.register_histogram_metric",
            "OpenTelemetryMetricRecorder.record_histogram_aggregated_batch",
        ]
    }
    return (
        problems
        + fingerprints(entry, ctx, vllm, wrappers, "python")
        + fingerprints(entry, ctx, ray, recorder, "python")
    )


def check_exported_metric_names(ctx: Context) -> list[str]:
    """ray_llm_eks/observability/exported-metrics.txt is what the pinned vLLM and Ray declare
    (tools/exported_metrics.py)."""
    from tools import exported_metrics

    vllm, ray = pinned_vllm(ctx), pinned_ray(ctx)
    derived = set(
        exported_metrics.derive(
            vllm.python_sources(exported_metrics.VLLM_DIRS), ray.python_sources(exported_metrics.RAY_DIRS)
        )
    )
    listed = exported_metrics.read_list()
    where = exported_metrics.LIST.relative_to(ROOT)
    return [f"{where}: {n} is not declared by {vllm} / {ray}" for n in sorted(listed - derived)] + [
        f"{where}: lacks {n}, which {vllm} / {ray} declare (python -m tools.exported_metrics)"
        for n in sorted(derived - listed)
    ]


def check_prometheus_build(ctx: Context) -> list[str]:
    """Our wrapper repeats the module's replace and exclude directives; the cloud discoveries still sit behind
    the remove_all_sd tag."""
    from go_binaries import build

    module = ctx.source(GoModule, "github.com/prometheus/prometheus", build.PROMETHEUS_MODULE_VERSION)

    def directives(text: str) -> list[str]:
        lines, block = [], None
        for raw in text.splitlines():
            line = raw.split("//")[0].strip()
            if block and line == ")":
                block = None
            elif block:
                if line:
                    lines.append(f"{block} {line}")
            elif line.startswith(("replace", "exclude")):
                verb, _, rest = line.partition(" ")
                if rest.strip() == "(":
                    block = verb
                else:
                    lines.append(f"{verb} {rest.strip()}")
        return sorted(lines)

    ours = directives((build.WRAPPERS / "prometheus" / "go.mod").read_text())
    theirs = directives(module.read("go.mod"))
    wrapper = "go_binaries/wrappers/prometheus/go.mod"
    problems = [] if ours == theirs else [f"{wrapper}: {ours} differ from {module}'s go.mod {theirs}"]
    if "remove_all_sd" not in module.read("plugins/plugin_aws.go"):
        problems.append(f"{module}: plugins/plugin_aws.go no longer honours the remove_all_sd build tag")
    return problems


def check_ray_dashboards(ctx: Context) -> list[str]:
    """tools/ray_dashboards.py regenerates the dashboards from the installed Ray and checks its patches."""
    pinned_ray(ctx)
    run = subprocess.run(
        [sys.executable, "-m", "tools.ray_dashboards", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    return [] if run.returncode == 0 else (run.stdout + run.stderr).strip().splitlines()
