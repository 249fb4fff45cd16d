"""Existing-cluster mode and waitForReady: config, the deploy-time cluster checks, and what the
program declares (under mocks; the e2e runs the same program against a real API server)."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import pytest
import yaml

import components.existing_cluster as existing_cluster
from adapters import stack
from adapters.stackfile import SecretValue
from domain import config_keys
from domain.cluster_checks import ClusterMismatch, check_cluster, check_crd
from domain.deploy_mode import check_kubeconfig, load_deploy_mode
from domain.errors import ConfigError
from domain.facts import POOL_NODE_LABEL
from domain.ray_service import ray_service_spec
from e2e.cluster import node_object, node_shapes
from offline.plan import run_program
from offline.policy_check import plan_resources
from policy import rules

NS = "ray-llm-eks:"
ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
)
EXISTING = {
    NS + "existingCluster": True,
    NS + "kubeconfig": SecretValue(KUBECONFIG),
    NS + "installKubeRay": False,
    NS + "installDevicePlugins": False,
}


def dev_settings():
    return stack.load_settings(stack.stack_file("dev"))


def seed_nodes(settings, mutate=None) -> list[dict]:
    """Nodes as the dev stack's node groups make them (the e2e harness registers the same)."""
    pools = {r: (p.nodes.instance_type, p.nodes.desired_size, p.efa) for r, p in settings.gpu_pools.items()}
    sysn = settings.cluster.system_nodes
    nodes = []
    for i, shape in enumerate(node_shapes(sysn.instance_type, sysn.desired_size, pools)):
        node, status = node_object(shape, i)
        node["status"] = status
        nodes.append(node)
    if mutate:
        mutate(nodes)
    return nodes


@functools.cache
def _parsed_crd() -> dict:
    """The 1 MB CRD, parsed once (with libyaml where PyYAML has it)."""
    text = (ROOT / "offline" / "schemas" / "ray.io_rayservices.v1.7.0.yaml").read_text()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def rayservice_crd() -> dict:
    return copy.deepcopy(_parsed_crd())  # tests mutate it


class FakeApi:
    def __init__(self, nodes, crd, namespaces=("default", "kube-system", "kuberay-system"), monitoring_crds=()):
        self.nodes, self.crd, self.namespaces = nodes, crd, namespaces
        self.monitoring_crds = monitoring_crds  # names of the Prometheus Operator's CRDs the cluster serves

    def get(self, path):
        assert path == "/api/v1/nodes"
        return {"items": self.nodes}

    def get_or_none(self, path):
        if path.startswith("/api/v1/namespaces/"):
            name = path.rsplit("/", 1)[1]
            return {"metadata": {"name": name}} if name in self.namespaces else None
        if path.endswith(".monitoring.coreos.com"):
            name = path.rsplit("/", 1)[1]
            return {"metadata": {"name": name}} if name in self.monitoring_crds else None
        assert path.endswith("/customresourcedefinitions/rayservices.ray.io")
        return self.crd


# ---- config


def test_deploy_mode_defaults_wait_and_install_everything():
    mode = load_deploy_mode(lambda key: None)
    assert (mode.existing_cluster, mode.install_kuberay, mode.install_device_plugins, mode.wait_for_ready) == (
        False,
        True,
        True,
        True,
    )


@pytest.mark.parametrize(
    "key", ["installKubeRay", "installDevicePlugins", "kubeContext", "kubeconfig", "kuberayNamespace"]
)
def test_existing_cluster_keys_need_existing_cluster(key):
    with pytest.raises(ConfigError, match=f"ray-llm-eks:{key} .*only with existingCluster: true"):
        load_deploy_mode({key: "false"}.get)


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        ({"installKubeRay": "true"}, "'ray-system': only with installKubeRay: false (ours runs in kuberay-system)"),
        ({"installKubeRay": "false", "kuberayNamespace": "Ray_System"}, "'Ray_System': a namespace name"),
    ],
)
def test_kuberay_namespace_needs_the_clusters_own_kuberay_and_a_valid_name(values, rule):
    with pytest.raises(ConfigError, match=re.escape(f"ray-llm-eks:kuberayNamespace = {rule}")):
        load_deploy_mode(({"existingCluster": "true", "kuberayNamespace": "ray-system"} | values).get)


def test_kubeconfig_value_is_never_printed():
    with pytest.raises(ConfigError) as caught:
        load_deploy_mode({"kubeconfig": "apiVersion: v1 secret-stuff"}.get)
    assert "secret-stuff" not in str(caught.value) and "[secret]" in str(caught.value)


def test_boolean_keys_are_checked():
    with pytest.raises(ConfigError, match=r"ray-llm-eks:waitForReady = 'yes': true or false"):
        load_deploy_mode({"waitForReady": "yes"}.get)


def test_kubeconfig_must_parse_and_name_its_context():
    with pytest.raises(ConfigError, match="a kubeconfig with clusters and contexts"):
        check_kubeconfig("just text", None)
    with pytest.raises(ConfigError, match=r"ray-llm-eks:kubeContext = 'other': a context of the kubeconfig: \['ctx'\]"):
        check_kubeconfig(KUBECONFIG, "other")
    check_kubeconfig(KUBECONFIG, "ctx")


def test_new_keys_are_declared():
    declared = config_keys.declared()
    for key in (
        "existingCluster",
        "kubeconfig",
        "kubeContext",
        "installKubeRay",
        "installDevicePlugins",
        "waitForReady",
        "kuberayNamespace",
    ):
        assert key in declared, key
    assert declared["kubeconfig"].get("secret") is True


# ---- deploy-time checks


@pytest.fixture(scope="module")
def seed():
    settings = dev_settings()
    return settings, ray_service_spec(settings)


def test_a_cluster_shaped_like_our_node_groups_passes(seed):
    settings, spec = seed
    assert check_cluster(FakeApi(seed_nodes(settings), rayservice_crd()), spec, settings.gpu_pools) == []


def test_each_mismatch_is_named(seed):
    settings, spec = seed

    def break_nodes(nodes):
        by = {n["metadata"]["name"]: n for n in nodes}
        by["prefill-0"]["spec"]["taints"] = []
        del by["decode-0"]["status"]["allocatable"]["vpc.amazonaws.com/efa"]
        by["decode-0"]["metadata"]["labels"].pop("nvidia.com/gpu.present")
        by["system-0"]["metadata"]["labels"][POOL_NODE_LABEL] = "general"

    found = check_cluster(FakeApi(seed_nodes(settings, break_nodes), rayservice_crd()), spec, settings.gpu_pools)
    assert found == [
        "no node is labelled ray-llm-eks/pool=system (the Ray head's nodeSelector)",
        "pool prefill: node prefill-0 lacks taint nvidia.com/gpu=true:NoSchedule",
        "pool decode: node decode-0 lacks label nvidia.com/gpu.present=true (the NVIDIA device plugin selects it)",
        "pool decode: node decode-0 does not advertise vpc.amazonaws.com/efa 1 (allocatable none)",
    ]


def test_a_missing_pool_and_a_worker_too_big_are_named(seed):
    settings, spec = seed
    big = copy.deepcopy(spec)
    worker = big["rayClusterConfig"]["workerGroupSpecs"][0]
    worker["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "500Gi"
    nodes = [n for n in seed_nodes(settings) if n["metadata"]["labels"][POOL_NODE_LABEL] != "decode"]
    found = check_cluster(FakeApi(nodes, rayservice_crd()), big, settings.gpu_pools)
    assert any(m.startswith("pool prefill: node prefill-0 has no room for a worker: needs memory 500Gi") for m in found)
    assert "pool decode: 0 node(s) labelled ray-llm-eks/pool=decode, the stack runs 1 worker(s)" in found


def test_device_resources_are_not_required_when_we_install_the_plugins(seed):
    settings, spec = seed

    def no_devices(nodes):
        for n in nodes:
            for k in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
                n["status"]["allocatable"].pop(k, None)

    api = FakeApi(seed_nodes(settings, no_devices), rayservice_crd())
    assert check_cluster(api, spec, settings.gpu_pools, devices=False) == []
    found = check_cluster(api, spec, settings.gpu_pools)  # one line per GPU node, naming GPU and EFA
    assert len(found) == 2 and all("nvidia.com/gpu 1" in m and "vpc.amazonaws.com/efa 1" in m for m in found)


def test_crd_missing_or_older_than_our_fields(seed):
    _, spec = seed
    assert check_crd(None, spec) == [
        "CRD rayservices.ray.io is not installed (install KubeRay, or set installKubeRay: true)"
    ]
    old = rayservice_crd()
    props = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del props["rayClusterConfig"]["properties"]["workerGroupSpecs"]["items"]["properties"]["resources"]
    found = check_crd(old, spec)
    assert len(found) == 1 and "spec.rayClusterConfig.workerGroupSpecs[0].resources" in found[0]
    assert check_crd(rayservice_crd(), spec) == []


# ---- the program


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
        ("prefill nodes g6.8xlarge", 1),
        ("decode nodes g6.8xlarge", 1),
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
        existing_cluster.verify_cluster(KUBECONFIG, ".", load_deploy_mode(values.get), settings)
    elsewhere = load_deploy_mode((values | {"kuberayNamespace": "kube-system"}).get)
    existing_cluster.verify_cluster(KUBECONFIG, ".", elsewhere, settings)  # a namespace the cluster has


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
        existing_cluster.verify_cluster(KUBECONFIG, ".", mode, settings)


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
