"""What the e2e hands Karpenter's kwok provider (e2e/karpenter.py), offline: the instance-types file from
our instance table, our NodePools with the kwok node class in place of EC2NodeClass, the verdict on a
node Karpenter made; the CRDs the e2e build copies from the module."""

from __future__ import annotations

import copy

import pytest

from e2e.karpenter import (
    E2E_CONSOLIDATE_AFTER,
    KWOK_NODE_LABEL,
    STACK_OVERRIDES,
    disruptions,
    ec2_node_classes,
    instance_types,
    kwok_node_pools,
    node_verdict,
)
from e2e.run import SCALING_STACK_FILE, settings_of
from go_binaries import build
from ray_llm_eks.domain.render import karpenter
from tests.unit.domain.cluster.test_karpenter import crd_validator, errors


@pytest.fixture(scope="module")
def settings():
    return settings_of(SCALING_STACK_FILE, STACK_OVERRIDES)


def test_instance_types_are_the_pools_fitting_types_with_gpus_and_efa(settings):
    types = {t["name"]: t for t in instance_types(settings, settings.region)}
    assert set(types) == {t for p in settings.gpu_pools.values() for t in karpenter.fitting_instance_types(p)}
    g6 = types["g6.8xlarge"]
    assert g6["resources"] == {
        "cpu": "32",
        "memory": "128Gi",
        "pods": g6["resources"]["pods"],
        "nvidia.com/gpu": "1",
        "vpc.amazonaws.com/efa": "1",
    }
    # The loader's shape (kwok/cloudprovider/helpers.go): offerings with Price, Available, Requirements.
    prices = {
        o["Requirements"][0]["values"][0]: o["Price"]
        for o in g6["offerings"]
        if o["Requirements"][1]["values"] == ["us-east-1a"]
    }
    assert prices["spot"] < prices["on-demand"] == 2.0144


def test_kwok_node_pools_differ_from_the_rendered_ones_only_in_node_class_and_consolidate_after(settings):
    for np in kwok_node_pools(settings):
        pool = settings.gpu_pools[np["metadata"]["name"]]
        shipped = karpenter.node_pool(
            pool, karpenter.ec2_node_class_ref(pool), settings.node_provisioning.spot(pool.app_role)
        )
        assert np["spec"]["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.kwok.sh",
            "kind": "KWOKNodeClass",
            "name": pool.name,
        }
        assert np["spec"]["disruption"]["consolidateAfter"] == E2E_CONSOLIDATE_AFTER != karpenter.CONSOLIDATE_AFTER
        same = copy.deepcopy(np)
        same["spec"]["template"]["spec"]["nodeClassRef"] = shipped["spec"]["template"]["spec"]["nodeClassRef"]
        same["spec"]["disruption"]["consolidateAfter"] = karpenter.CONSOLIDATE_AFTER
        assert same == shipped
        assert errors(crd_validator("karpenter.sh_nodepools.v1.14.1.yaml"), np) == []


def test_the_e2es_ec2_node_classes_are_valid(settings):
    for nc in ec2_node_classes(settings):
        assert errors(crd_validator("karpenter.k8s.aws_ec2nodeclasses.v1.14.1.yaml"), nc) == []


def kwok_node(pool: str, capacity: str = "spot", itype: str = "g6.8xlarge", taint: bool = True) -> dict:
    labels = {
        "karpenter.sh/nodepool": pool,
        "ray-llm-eks/pool": pool,
        "karpenter.sh/capacity-type": capacity,
        "node.kubernetes.io/instance-type": itype,
        KWOK_NODE_LABEL: "fake",
    }
    taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}] if taint else []
    return {"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints}}


def test_node_verdict_passes_the_right_node_and_names_each_wrong_thing():
    assert node_verdict(kwok_node("prefill"), "prefill", "spot", "g6.8xlarge") == []
    assert node_verdict(kwok_node("decode"), "prefill", "spot", "g6.8xlarge") == [
        "karpenter.sh/nodepool=decode, not prefill",
        "ray-llm-eks/pool=decode, not prefill",
    ]
    assert node_verdict(kwok_node("prefill", "on-demand"), "prefill", "spot", "g6.8xlarge") == [
        "karpenter.sh/capacity-type=on-demand, not spot"
    ]
    assert node_verdict(kwok_node("prefill", itype="g6.16xlarge"), "prefill", "spot", "g6.8xlarge") != []
    assert "no GPU taint" in node_verdict(kwok_node("prefill", taint=False), "prefill", "spot", "g6.8xlarge")[0]


def test_the_build_copies_the_crds_karpenter_watches():
    (c,) = [c for c in build.COMPONENTS if c.name == "karpenter-kwok"]
    assert c.version == "v1.14.1" and c.packages == (("sigs.k8s.io/karpenter/kwok", "karpenter-kwok"),)
    assert {dest for _, _, dest in c.module_files} == {
        "crds/karpenter.sh_nodeclaims.yaml",
        "crds/karpenter.sh_nodeoverlays.yaml",
        "crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
        "crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
    }


def test_disruptions_read_karpenters_log():
    # Two lines of a v1.14.1 log (e2e run), shortened; a non-JSON line is skipped.
    log = "\n".join(
        [
            '{"level":"INFO","message":"disrupting node(s)","command":"Empty/89a1: delete: nodepools=[prefill]: [n1]",'
            '"decision":"delete","disrupted-nodes":[{"Node":{"name":"n1"},"NodeClaim":{"name":"prefill-x"}}]}',
            "panic: not json",
            '{"level":"INFO","message":"created nodeclaim"}',
            '{"level":"INFO","message":"disrupting node(s)","command":"Drifted/53: replace: nodepools=[decode]: [n2]",'
            '"decision":"replace","disrupted-nodes":[{"Node":{"name":"n2"}}]}',
        ]
    )
    assert disruptions(log) == [("Empty", "delete", ["n1"]), ("Drifted", "replace", ["n2"])]
