"""Existing-cluster mode's rules called directly: its config keys, and the deploy-time checks of a
cluster against the spec that deploys (nodes, pools, device resources, the RayService CRD), on a fake
Kubernetes API. What the program declares in that mode: tests/plan/components/test_existing_cluster.py."""

from __future__ import annotations

import copy
import functools
import re

import pytest
import yaml

from e2e.cluster import node_object, node_shapes
from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.cluster.deploy_mode import check_kubeconfig
from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.loading.config import load_deploy_mode
from ray_llm_eks.domain.platform.cluster_checks import check_cluster, check_crd
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from tests.conftest import ROOT

KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
)


def dev_settings():
    return stack.load_settings(stack.stack_file("dev", ROOT))


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
        ({"installKubeRay": "true"}, "ray-system: only with installKubeRay: false (ours runs in kuberay-system)"),
        ({"installKubeRay": "false", "kuberayNamespace": "Ray_System"}, "Ray_System: a namespace name"),
        ({"installKubeRay": "false", "kuberayNamespace": "default"}, "default: a namespace of the operator's own"),
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
    with pytest.raises(ConfigError, match=r"ray-llm-eks:kubeContext = other: a context of the kubeconfig: \[ctx\]"):
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


def dev_seed():
    """dev's Settings and the RayService spec the one builder renders for it."""
    settings = dev_settings()
    return settings, ray_service_spec(settings)


@pytest.fixture(scope="module")
def seed():
    return dev_seed()


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
        "pool decode: node decode-0 lacks label nvidia.com/gpu.present=true (the NVIDIA device plugin selects it)",
        "pool decode: node decode-0 does not advertise vpc.amazonaws.com/efa 1 (allocatable none)",
        "pool prefill: node prefill-0 lacks taint nvidia.com/gpu=true:NoSchedule",
    ]


def test_a_missing_pool_and_a_worker_too_big_are_named(seed):
    settings, spec = seed
    big = copy.deepcopy(spec)
    (worker,) = [g for g in big["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "prefill"]
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
