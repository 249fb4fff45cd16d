"""What the e2e emulates of the scale-up chain (e2e/scale_up.py, e2e/template_node.py), offline: the
Cluster Autoscaler's template node from our ASG tags, Ray's scale patch, the scheduler's message."""

from __future__ import annotations

import pytest

from e2e.scale_up import ray_autoscaler_patch, unschedulable_counts
from e2e.template_node import template_node
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.fit.scaling import NODE_TEMPLATE, node_template_tags
from tests.unit.domain.platform.test_existing_cluster_checks import dev_settings


@pytest.fixture(scope="module")
def prefill():
    return dev_settings().gpu_pools["prefill"]


def test_template_node_is_the_instance_type_plus_our_tags(prefill):
    tags = node_template_tags(prefill.name, prefill.spec, prefill.efa)
    node = template_node("prefill-asg-x", "g6.8xlarge", tags, "us-east-1", "us-east-1a")
    labels = node["metadata"]["labels"]
    assert labels[POOL_NODE_LABEL] == "prefill" and labels["nvidia.com/gpu.present"] == "true"
    assert labels["node.kubernetes.io/instance-type"] == "g6.8xlarge"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    # The autoscaler's instance table for g6.8xlarge: 32 vCPU, 131072 MiB, 1 GPU; no reservations.
    assert node["status"]["capacity"] == {
        "pods": "110",
        "cpu": "32",
        "nvidia.com/gpu": "1",
        "memory": str(131072 * 1024 * 1024),
        "vpc.amazonaws.com/efa": "1",
    }
    assert node["status"]["allocatable"] == node["status"]["capacity"]


def test_without_our_tags_the_template_lacks_efa_and_the_pools_label(prefill):
    """The GPU count comes from the instance type; EFA, the role label and the taint only from tags."""
    node = template_node("bare", "g6.8xlarge", {}, "us-east-1", "us-east-1a")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert "vpc.amazonaws.com/efa" not in node["status"]["capacity"]
    assert POOL_NODE_LABEL not in node["metadata"]["labels"] and node["spec"] == {}


def test_tags_the_autoscaler_would_skip_are_skipped():
    tags = {
        f"{NODE_TEMPLATE}/resources/vpc.amazonaws.com/efa": "one",  # not a quantity
        f"{NODE_TEMPLATE}/taint/dedicated": "gpu",  # no :Effect
        f"{NODE_TEMPLATE}/label/": "x",  # no label name
    }
    node = template_node("t", "m7i.xlarge", tags, "us-east-1", "us-east-1a")
    assert "vpc.amazonaws.com/efa" not in node["status"]["capacity"]
    assert node["spec"] == {} and "" not in node["metadata"]["labels"]
    with pytest.raises(ValueError, match=r"g9\.huge: not in"):
        template_node("t", "g9.huge", {}, "us-east-1", "us-east-1a")


def test_ray_autoscaler_patch_is_rays_own_and_capped_at_max():
    cluster = {"spec": {"workerGroupSpecs": [{"groupName": "prefill", "replicas": 2, "maxReplicas": 4},
                                             {"groupName": "decode", "replicas": 1, "maxReplicas": 2}]}}  # fmt: skip
    assert ray_autoscaler_patch(cluster, "decode", 2) == [
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 2}
    ]
    assert ray_autoscaler_patch(cluster, "prefill", 9)[0]["value"] == 4
    assert ray_autoscaler_patch(cluster, "prefill", 2) == []


def test_scheduler_message_is_counted_per_reason():
    message = (  # as kube-scheduler 1.35 wrote it in make e2e
        "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 3 Insufficient vpc.amazonaws.com/efa, "
        "3 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: 0/6 "
        "nodes are available: 2 No preemption victims found for incoming pod, 4 Preemption is not helpful for "
        "scheduling."
    )
    assert unschedulable_counts(message) == (
        6,
        {
            "Insufficient nvidia.com/gpu": 2,
            "Insufficient vpc.amazonaws.com/efa": 3,
            "node(s) didn't match Pod's node affinity/selector": 3,
        },
    )
    with pytest.raises(ValueError, match="not a scheduler FitError"):
        unschedulable_counts("pod has unbound immediate PersistentVolumeClaims")
