"""Each judgement of `make e2e` fails on the input it exists to catch (e2e/checks.py, e2e/observe.py)."""

from __future__ import annotations

import copy

import yaml

from adapters import stack
from domain.facts import POOL_NODE_LABEL
from domain.ray_service import ray_service_spec
from e2e.checks import max_model_lens, names_failed_resource, unkept_fields
from e2e.observe import scheduling_problems


def test_a_field_pruned_or_changed_by_the_api_server_is_named():
    sent = ray_service_spec(stack.load_settings(stack.stack_file("dev")))
    live = copy.deepcopy(sent)
    live["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["schedulerName"] = "default-scheduler"  # defaulted
    assert unkept_fields(sent, live) == []
    pruned = copy.deepcopy(live)
    del pruned["rayClusterConfig"]["workerGroupSpecs"][0]["resources"]
    assert unkept_fields(sent, pruned) == ["spec.rayClusterConfig.workerGroupSpecs[0].resources"]
    # The operator writes quantities back in canonical form: the same amount is kept, another is not.
    head = live["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert head["requests"]["cpu"] == "2000m" and head["limits"]["memory"] == "8192Mi"
    head["requests"]["cpu"], head["limits"]["memory"] = "2", "8Gi"
    assert unkept_fields(sent, live) == []
    head["requests"]["cpu"] = "3"
    assert unkept_fields(sent, live) == [
        "spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].resources.requests.cpu"
    ]
    head["requests"]["cpu"] = "2"
    changed = copy.deepcopy(live)
    changed["rayClusterConfig"]["workerGroupSpecs"][1]["maxReplicas"] = 7
    changed["rayClusterConfig"]["enableInTreeAutoscaling"] = 0  # falsy, yet not the False we sent
    assert unkept_fields(sent, changed) == [
        "spec.rayClusterConfig.enableInTreeAutoscaling",
        "spec.rayClusterConfig.workerGroupSpecs[1].maxReplicas",
    ]


def test_max_model_len_is_read_per_role_not_found_as_text():
    served = ray_service_spec(stack.load_settings(stack.stack_file("dev")))["serveConfigV2"]
    # The seed document holds "2048" already (max_num_batched_tokens): a text search would pass here.
    assert "2048" in served
    assert max_model_lens(served) == {"prefill": 4096, "decode": 4096}
    document = yaml.safe_load(served)
    document["applications"][0]["args"]["decode_config"]["engine_kwargs"]["max_model_len"] = 2048
    assert max_model_lens(yaml.safe_dump(document)) == {"prefill": 4096, "decode": 2048}


def test_the_failed_resource_is_named_by_type_and_name_not_by_a_substring():
    ray_service_failed = (
        "Diagnostics:\n  kubernetes:ray.io/v1:RayService (llm-rayservice):\n    error: resource llm/llm was "
        "successfully created, but ... timed out waiting for the condition\n"
    )
    other_failed = "Diagnostics:\n  kubernetes:core/v1:Namespace (llm-namespace):\n    error: llm RayService ...\n"
    assert names_failed_resource(ray_service_failed, "kubernetes:ray.io/v1:RayService", "llm-rayservice")
    assert not names_failed_resource(other_failed, "kubernetes:ray.io/v1:RayService", "llm-rayservice")


def _pod(name, node_type, group, node):
    labels = {"ray.io/node-type": node_type, "ray.io/group": group}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": {"conditions": []}}


def test_a_pod_on_the_wrong_pool_or_unbound_is_a_scheduling_problem():
    nodes = {n: {POOL_NODE_LABEL: n.removesuffix("-0")} for n in ("system-0", "prefill-0", "decode-0")}
    right = [_pod("h", "head", "headgroup", "system-0"), _pod("p", "worker", "prefill", "prefill-0")]
    assert scheduling_problems(None, right, nodes) == []
    swapped = [_pod("h", "head", "headgroup", "system-0"), _pod("p", "worker", "prefill", "decode-0")]
    assert scheduling_problems(None, swapped, nodes) == [
        "pod p landed on decode-0 (ray-llm-eks/pool=decode), not ray-llm-eks/pool=prefill"
    ]
    unbound = [_pod("h", "head", "headgroup", None)]
    assert scheduling_problems(None, unbound, nodes) == ["pod h is not bound to a node yet"]


def test_our_instance_table_is_compared_with_the_autoscalers_field_by_field():
    from tools.check_autoscaler_instance_types import differences

    def entry(name, vcpu, mib, gpu):
        fields = f'InstanceType: "{name}",\n\t\tVCPU: {vcpu},\n\t\tMemoryMb: {mib},\n\t\tGPU: {gpu},\n\t\t'
        return f'"{name}": {{\n\t\t{fields}Architecture: "amd64",\n\t}},\n'

    from domain.aws_facts import INSTANCE_SPECS

    same = "".join(entry(n, s.vcpus, s.memory_gib * 1024, s.gpus) for n, s in INSTANCE_SPECS.items())
    assert differences(same) == []
    other_gpus = same.replace(entry("g6.8xlarge", 32, 131072, 1), entry("g6.8xlarge", 32, 131072, 2))
    assert differences(other_gpus) == [
        "g6.8xlarge: ours (vCPU, MiB, GPU, arch) (32, 131072, 1, 'amd64'), the autoscaler's (32, 131072, 2, 'amd64')"
    ]
    assert differences(same.replace(entry("m7i.xlarge", 4, 16384, 0), "")) == [
        "m7i.xlarge: not in the autoscaler's table (a scale-up from zero cannot build its node)"
    ]


def test_a_replacement_clusters_pod_judged_unschedulable_while_the_old_one_leaves_is_waited_out(monkeypatch):
    """The scheduler judges a new cluster's pod while the replaced cluster's pods still hold the nodes, then
    places it once they are gone: `placed=True` waits for that; the default returns the first verdict."""
    from e2e import observe

    def pod(name, kind, group, node=None, unschedulable=False):
        labels = {"ray.io/node-type": kind, "ray.io/group": group}
        verdict = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "Insufficient cpu"}
        status = {"conditions": [verdict]} if unschedulable else {}
        return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": status}

    head = pod("h", "head", "headgroup", "system-0")
    judged_early = [head, pod("d", "worker", "decode", unschedulable=True)]
    placed_later = [head, pod("d", "worker", "decode", "decode-0")]
    nodes = {"system-0": {POOL_NODE_LABEL: "system"}, "decode-0": {POOL_NODE_LABEL: "decode"}}
    for placed, wanted in ((False, 1), (True, 0)):
        polls = iter([judged_early, judged_early, placed_later])
        monkeypatch.setattr(observe, "ray_cluster_of", lambda *a: {"metadata": {"name": "rc"}})
        monkeypatch.setattr(observe, "pods_of", lambda *a, polls=polls: next(polls, placed_later))
        monkeypatch.setattr(observe, "POLL", 0)
        _, _, problems = observe.wait_scheduled(None, "llm", "llm", {"decode": 1}, nodes, 10, placed=placed)
        assert len(problems) == wanted, (placed, problems)
