"""Each judgement of `make e2e` fails on the input it exists to catch (e2e/checks.py, e2e/observe.py)."""

from __future__ import annotations

import copy

import yaml

from e2e.admission import breaking_pod, state_field_managers
from e2e.checks import (
    admission_problems,
    max_model_lens,
    names_failed_resource,
    owned_namespaces,
    pod_copy,
    psa_labels,
    psa_verdict,
    stricter_problems,
    unkept_fields,
    warned_as_refused,
)
from e2e.observe import scheduling_problems
from ray_llm_eks.adapters import stack
from ray_llm_eks.adapters.kube_client import warning_text
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from ray_llm_eks.domain.security import pod_security
from tests.conftest import ROOT


def test_a_field_pruned_or_changed_by_the_api_server_is_named():
    sent = ray_service_spec(stack.load_settings(stack.stack_file("dev", ROOT)))
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
    served = ray_service_spec(stack.load_settings(stack.stack_file("dev", ROOT)))["serveConfigV2"]
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

    from ray_llm_eks.domain.platform.aws_facts import INSTANCE_SPECS

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


# -- PodSecurity admission (e2e/admission.py) ---------------------------------------------------------

BASELINE_REFUSAL = (
    'POST /api/v1/namespaces/llm-at-baseline/pods?dryRun=All: 403 pods "decode-0-" is forbidden: violates '
    'PodSecurity "baseline:latest": hostPath volumes (volume "model-cache"), privileged (container "ray-worker" '
    "must not set securityContext.privileged=true)"
)
BASELINE_WARNING = (
    'would violate PodSecurity "baseline:latest": hostPath volumes (volume "model-cache"), privileged '
    '(container "ray-worker" must not set securityContext.privileged=true)'
)


def test_a_warning_header_is_read_as_the_api_server_wrote_it():
    header = '299 - "would violate PodSecurity \\"baseline:latest\\": hostPath volumes (volume \\"a\\\\b\\")"'
    assert warning_text(header) == 'would violate PodSecurity "baseline:latest": hostPath volumes (volume "a\\b")'
    assert warning_text('299 - "caf\u00c3\u00a9"') == "caf\u00e9"  # UTF-8 read by http.client as Latin-1
    assert warning_text("not a warning") == "not a warning"


def test_a_podsecurity_message_names_its_level_and_reasons():
    assert psa_verdict(BASELINE_REFUSAL) == ("baseline", {"hostPath volumes", "privileged"})
    several = (
        'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (containers "a", "b" '
        'must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "a" must '
        'set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod must not set runAsNonRoot=false)'
    )
    assert psa_verdict(several) == (
        "restricted",
        {"allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true"},
    )
    assert psa_verdict('serviceaccount "x" not found') is None


def test_the_stack_namespaces_are_those_its_field_managers_wrote():
    def ns(name, *managers):
        return {"metadata": {"name": name, "managedFields": [{"manager": m, "operation": "Apply"} for m in managers]}}

    live = [ns("llm", "pulumi-kubernetes-a1b2", "kube-controller-manager"), ns("default", "kube-apiserver"),
            ns("llm-yaml", "pulumi-kubernetes-ffff"), {"metadata": {"name": "bare"}}]  # fmt: skip
    assert owned_namespaces(live, {"pulumi-kubernetes-a1b2"}) == ["llm"]
    assert owned_namespaces(live, set()) == []
    deployment = {"resources": [{"inputs": {"__fieldManager": "pulumi-kubernetes-a1b2"}}, {"outputs": {}}]}
    assert state_field_managers(deployment) == {"pulumi-kubernetes-a1b2"}


def test_psa_labels_are_picked_from_the_rest():
    labels = {**pod_security.labels("privileged"), "kubernetes.io/metadata.name": "llm"}
    assert psa_labels(labels) == pod_security.labels("privileged")
    assert psa_labels(None) == {}


def test_a_pod_copy_keeps_the_spec_and_drops_what_the_server_wrote():
    spec = ray_service_spec(stack.load_settings(stack.stack_file("dev", ROOT)))
    template = spec["rayClusterConfig"]["workerGroupSpecs"][0]["template"]
    live = {"metadata": {"name": "w-1", "namespace": "llm", "uid": "u", "resourceVersion": "7",
                         "ownerReferences": [{"kind": "RayCluster"}], "labels": {"ray.io/group": "g"}},
            "spec": {**template["spec"], "nodeName": "decode-0"}, "status": {"phase": "Pending"}}  # fmt: skip
    body = pod_copy(live)
    assert body["metadata"] == {"generateName": "w-1-", "labels": {"ray.io/group": "g"}}
    assert body["spec"] == live["spec"] and "status" not in body


def test_the_admission_judgements_fail_on_what_they_exist_to_catch():
    admitted = {"head": ("", []), "decode-0": ("", [BASELINE_WARNING])}
    assert admission_problems(admitted) == []
    at_baseline = {"head": ("", []), "decode-0": (BASELINE_REFUSAL, [])}
    assert admission_problems(at_baseline) == [f"decode-0: {BASELINE_REFUSAL}"]
    needs = pod_security.SERVING_NEEDS
    assert stricter_problems(at_baseline, "baseline", needs) == []
    assert warned_as_refused(admitted, at_baseline, "baseline") == []
    # Nothing refused at the next level: the namespace could enforce it.
    assert stricter_problems(admitted, "baseline", needs) == [
        "every pod passes baseline: the namespace could enforce it"
    ]
    # Refused for a reason pod_security.py does not name.
    host = BASELINE_REFUSAL.replace("hostPath volumes", "host namespaces")
    assert stricter_problems({"decode-0": (host, [])}, "baseline", needs) == [
        "decode-0: ['host namespaces'] beyond what keeps it lower "
        "(['hostPath volumes', 'non-default capabilities', 'privileged'])"
    ]
    assert stricter_problems({"decode-0": (host, [])}, "baseline", None) == []
    # Refused, but not by PodSecurity at that level.
    other = 'POST ...: 403 pods "x" is forbidden: error looking up service account llm-at-baseline/ray'
    assert stricter_problems({"decode-0": (other, [])}, "baseline", needs)[0].startswith("decode-0: refused, not by")
    # The warn label reported less than enforcing refuses, or nothing.
    assert warned_as_refused({"decode-0": ("", [])}, at_baseline, "baseline") == [
        "decode-0: warned [], refused ['hostPath volumes', 'privileged']"
    ]


def test_the_pod_that_breaks_a_level_is_one_the_level_below_admits():
    assert breaking_pod("baseline")["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    assert breaking_pod("restricted")["spec"]["containers"][0]["securityContext"] == {}
    assert pod_security.next_level("privileged") == "baseline" and pod_security.next_level("restricted") is None
