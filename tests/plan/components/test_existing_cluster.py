"""Existing-cluster mode and waitForReady: what the program declares and checks at deploy time (under
mocks, on a fake Kubernetes API; the e2e runs the same program against a real API server). The mode's
rules called directly: tests/unit/domain/platform/test_existing_cluster_checks.py."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

import ray_llm_eks.components.existing_cluster as existing_cluster
import ray_llm_eks.stack_args
from offline import plan as plan_cli
from offline.plan import run_program
from offline.policy_check import plan_resources
from policy import rules
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.loading.config import load_deploy_mode
from ray_llm_eks.domain.platform.cluster_checks import ClusterMismatch
from tests.conftest import failing_run
from tests.unit.domain.platform.test_existing_cluster_checks import (
    KUBECONFIG,
    FakeApi,
    dev_seed,
    rayservice_crd,
    seed_nodes,
)

NS = "ray-llm-eks:"
EXISTING = {
    NS + "existingCluster": True,
    NS + "kubeconfig": SecretValue(KUBECONFIG),
    NS + "installKubeRay": False,
    NS + "installDevicePlugins": False,
}


# ---- config


# ---- deploy-time checks


def checked(settings, mode):
    """What the program hands ExistingCluster for this mode (stack_args)."""
    return ray_llm_eks.stack_args.existing_cluster_args(
        replace(settings, deploy_mode=mode), None, offline_plan=False, sealed=False
    )


# ---- the program


@pytest.fixture(scope="module")
def seed():
    return dev_seed()


@pytest.fixture
def fake_cluster(monkeypatch, seed):
    settings, _ = seed
    seen = []

    class Client:
        @classmethod
        def from_kubeconfig(cls, text, base_dir=".", context=None):
            seen.append((text, context))
            return FakeApi(seed_nodes(settings), rayservice_crd(), ("kube-system", "kuberay-system", "ray-system"))

    monkeypatch.setattr(existing_cluster, "KubeClient", Client)
    return seen


def test_existing_cluster_mode_declares_no_aws_resource(fake_cluster):
    plan = run_program("dev", {**EXISTING, NS + "waitForReady": False})
    types = {r.type for r in plan.registrations}
    assert not [t for t in types if t.startswith(("aws:", "eks:"))]
    assert "ray-llm-eks:existing_cluster:ExistingCluster" in types
    assert not [t for t in types if t.startswith("kubernetes:helm.sh")]  # neither KubeRay nor device plugins
    provider = plan.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"
    rs = plan.one("kubernetes:ray.io/v1:RayService")
    awaits = {k: v for k, v in rs.inputs["metadata"]["annotations"].items() if k.startswith("pulumi.com/")}
    assert awaits == {"pulumi.com/skipAwait": "true", "pulumi.com/patchForce": "true"}
    assert rs.provider.startswith(provider.urn)
    assert fake_cluster == [(KUBECONFIG, None)]  # the checks read the cluster of the configured kubeconfig
    assert "kubeconfig" not in plan.outputs and "clusterName" not in plan.outputs


def test_the_cluster_is_checked_against_the_spec_that_deploys(fake_cluster, monkeypatch):
    checked = []
    real = existing_cluster.check_cluster
    monkeypatch.setattr(
        existing_cluster, "check_cluster", lambda api, spec, *a, **k: checked.append(spec) or real(api, spec, *a, **k)
    )
    plan = run_program("dev", EXISTING)
    assert checked == [plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]]


def test_existing_cluster_cost_prices_only_the_gpu_nodes_its_workers_occupy_and_names_the_rest(fake_cluster, dev):
    plan = run_program("dev", EXISTING)
    estimate = plan.outputs["costEstimate"]
    assert [(x["item"], x["quantity"]) for x in estimate["lines"]] == [
        ("decode nodes g6.8xlarge", 1),  # pools in name order, as the Pulumi CLI hands them over
        ("prefill nodes g6.8xlarge", 1),
    ]
    dev_lines = {x["item"]: x["usdPerHour"] for x in dev.outputs["costEstimate"]["lines"]}
    assert estimate["usdPerHour"] == round(dev_lines["prefill nodes g6.8xlarge"] * 2, 4)
    assert (
        "EKS control plane" in estimate["notPriced"]
        and "NAT gateways and their IPv4 addresses" in estimate["notPriced"]
    )
    printed = plan.summary()
    assert "prices: the existing cluster's GPU nodes that the Ray workers occupy" in printed
    assert "not priced (the existing cluster's own): EKS control plane, NAT gateways" in printed
    assert dev.outputs["costEstimate"]["notPriced"] == [] and "EKS control plane (standard support)" in dev_lines


def test_existing_cluster_can_still_install_kuberay_and_plugins(fake_cluster):
    plan = run_program("dev", {NS + "existingCluster": True, NS + "kubeconfig": SecretValue(KUBECONFIG)})
    releases = sorted(r.name for r in plan.of_type("kubernetes:helm.sh/v3:Release"))
    assert releases == ["aws-efa-k8s-device-plugin", "kuberay-operator", "nvidia-device-plugin"]


def test_kuberay_elsewhere_opens_the_dashboard_to_that_namespace_and_passes_the_policy_pack(fake_cluster):
    plan = run_program("dev", {**EXISTING, NS + "kuberayNamespace": "ray-system"})
    policy = plan.one(
        "kubernetes:networking.k8s.io/v1:NetworkPolicy", "llm-network-policies-dashboard-from-kuberay-operator"
    )
    source = policy.inputs["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]
    assert source["values"] == ["ray-system"]
    assert rules.check_all(plan_resources(plan)) == []  # the pack reads the namespace the program names


def test_a_kuberay_namespace_the_cluster_lacks_is_named(monkeypatch, seed):
    settings, _ = seed

    class Client:
        @classmethod
        def from_kubeconfig(cls, text, base_dir=".", context=None):
            return FakeApi(seed_nodes(settings), rayservice_crd())

    monkeypatch.setattr(existing_cluster, "KubeClient", Client)
    values = {"existingCluster": "true", "installKubeRay": "false", "kuberayNamespace": "ray-sytem"}
    with pytest.raises(ClusterMismatch, match="KubeRay operator namespace ray-sytem does not exist"):
        existing_cluster.verify_cluster(KUBECONFIG, ".", checked(settings, load_deploy_mode(values.get)))
    elsewhere = load_deploy_mode((values | {"kuberayNamespace": "kube-system"}).get)
    existing_cluster.verify_cluster(KUBECONFIG, ".", checked(settings, elsewhere))  # a namespace the cluster has


def test_a_mismatched_cluster_fails_naming_the_mismatch(monkeypatch, seed):
    """What the provider's kubeconfig waits for (the program test above shows the wiring)."""
    settings, _ = seed

    class Client:
        @classmethod
        def from_kubeconfig(cls, text, base_dir=".", context=None):
            return FakeApi([n for n in seed_nodes(settings) if n["metadata"]["name"] != "decode-0"], rayservice_crd())

    monkeypatch.setattr(existing_cluster, "KubeClient", Client)
    mode = load_deploy_mode({"existingCluster": "true", "installKubeRay": "false"}.get)
    with pytest.raises(ClusterMismatch, match=r"pool decode: 0 node\(s\) labelled ray-llm-eks/pool=decode"):
        existing_cluster.verify_cluster(KUBECONFIG, ".", checked(settings, mode))


def test_eks_mode_waits_for_ready_by_default(dev):
    rs = dev.one("kubernetes:ray.io/v1:RayService")
    assert rs.inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"


def test_external_observability_needs_the_clusters_prometheus_operator(monkeypatch, seed):
    """observability external adds our monitors to the cluster's own Prometheus Operator: a cluster
    without its CRDs is named before anything is applied; one with them gets monitors, rule and
    dashboards, and no chart of ours."""
    settings, _ = seed
    crds = ()

    class Client:
        @classmethod
        def from_kubeconfig(cls, text, base_dir=".", context=None):
            return FakeApi(seed_nodes(settings), rayservice_crd(), monitoring_crds=crds)

    monkeypatch.setattr(existing_cluster, "KubeClient", Client)
    external = {**EXISTING, NS + "observability": {"mode": "external", "prometheusRelease": "prometheus"}}
    with pytest.raises(ClusterMismatch, match=r"lacks \[.podmonitors.monitoring.coreos.com', 'prometheusrules"):
        run_program("dev", external)
    crds = ("podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")
    plan = run_program("dev", external)
    monitors = plan.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert sorted(m.inputs["metadata"]["name"] for m in monitors) == ["ray-head", "ray-workers"]
    assert {m.inputs["metadata"]["labels"]["release"] for m in monitors} == {"prometheus"}  # theirs
    assert len(plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")) == 1
    assert not plan.of_type("kubernetes:helm.sh/v3:Release")
    assert not plan.of_type("kubernetes:monitoring.coreos.com/v1:ServiceMonitor")  # their KubeRay, their monitor
    assert rules.check_all(plan_resources(plan)) == []


# ---- an offline plan needs no cluster


@pytest.fixture
def unreachable_kubeconfig(tmp_path, monkeypatch):
    """The environment's kubeconfig (no kubeconfig key in the stack) naming a local port nothing listens on."""
    with socket.socket() as probe:  # a port that was free a moment ago: connecting is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("https://127.0.0.1:6443", f"https://127.0.0.1:{port}"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return port


ON_PREM = (
    "config:\n  aws:region: us-east-1\n  ray-llm-eks:environment: dev\n  ray-llm-eks:existingCluster: true\n"
    "  ray-llm-eks:installKubeRay: false\n  ray-llm-eks:installDevicePlugins: false\n"
    "  ray-llm-eks:systemNodes: {instanceType: m7i.xlarge, desiredSize: 1}\n  ray-llm-eks:gpuPools:\n"
    "    prefill: {instanceType: g6.8xlarge, desiredSize: 1}\n    decode: {instanceType: g6.8xlarge, desiredSize: 1}\n"
    "  ray-llm-eks:gpuAmiReleaseVersion: v20260903\n"
)


def test_make_plan_on_an_unreachable_cluster_defers_its_checks(project, unreachable_kubeconfig, capsys):
    """docs/operations.md's existing-cluster stack, the environment's kubeconfig, no API server behind it."""
    (project / "Pulumi.onprem.yaml").write_text(ON_PREM)
    out = project / "plan-onprem"
    assert plan_cli.main(["--stack", "onprem", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err + printed.out
    (line,) = [x.strip() for x in printed.out.splitlines() if "deferred to deploy time: the existing cluster" in x]
    assert line.endswith(f"the cluster was not reached (GET https://127.0.0.1:{unreachable_kubeconfig}/api/v1/nodes: "
                         "[Errno 111] Connection refused)"), line  # fmt: skip
    assert (out / "resources.json").exists()


def test_a_sealed_kubeconfig_is_not_read_offline(project, monkeypatch):
    """A kubeconfig set with `pulumi config set --secret`: offline it is the text [secret], never a cluster."""

    class Client:
        @classmethod
        def from_kubeconfig(cls, *args, **kwargs):
            raise AssertionError("the offline plan read a sealed kubeconfig")

    monkeypatch.setattr(existing_cluster, "KubeClient", Client)
    (project / "Pulumi.onprem.yaml").write_text(
        ON_PREM + "  ray-llm-eks:kubeconfig:\n    secure: v1:c2FsdA==:a3ViZQ==\n"
    )
    plan = run_program("onprem", root=project)
    assert plan.outputs["deferredChecks"][-1] == existing_cluster.deferred(
        "kubeconfig is a `secure:` value, which only `pulumi up` decrypts"
    )
    assert plan.one("pulumi:providers:kubernetes").inputs["kubeconfig"] == "[secret]"


def test_at_deploy_time_an_unreachable_cluster_is_one_line(unreachable_kubeconfig):
    overrides = {NS + "existingCluster": True, NS + "installKubeRay": False, NS + "installDevicePlugins": False}
    error, _ = failing_run({**overrides, NS + "apiKeys": SecretValue("k" * 24)}, offline_plan=False)
    assert str(error).startswith(
        f"invalid config {NS}kubeconfig: a cluster this machine reaches (GET https://127.0.0.1:"
    )
    assert "\n" not in str(error)
