"""The policy pack (policy/rules.py): every shipped stack passes, and each policy fails on a plan
where exactly its guard is off (one mutation of the real dev plan, or a stack setting)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from offline.plan import run_program
from offline.policy_check import main as policy_main
from offline.policy_check import plan_resources, violations
from policy import rules
from policy.crossguard import resource_validator, stack_validator
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from tests.conftest import ROOT, SHIPPED_STACKS


@pytest.mark.parametrize("stack", sorted(SHIPPED_STACKS | {"dp", "tp", "xpyd"}))
def test_shipped_stacks_pass_every_policy(plans, stack):
    assert violations(plans[stack]) == []


def test_make_policy_passes_dev(capsys):
    assert policy_main(["--stack", "dev"]) == 0
    assert f"{len(rules.policies())} policies passed" in capsys.readouterr().out


def test_each_policy_is_one_kind_with_a_unique_name():
    """CrossGuard refuses two policies of one name; each rule is a resource or a stack policy."""
    names = [p.name for p in rules.policies()]
    assert len(names) == len(set(names)) == 17
    assert all((p.per_resource is None) != (p.whole_stack is None) for p in rules.policies())


def _mutated(plan, type_: str, change, name: str | None = None) -> list[rules.Resource]:
    """The plan's resources with one resource's inputs changed in place by `change(props)`."""
    resources, hit = [], 0
    for r in plan_resources(plan):
        if r.type == type_ and (name is None or r.name == name) and not hit:
            props = copy.deepcopy(dict(r.props))
            change(props)
            r, hit = replace(r, props=props), 1
        resources.append(r)
    assert hit, f"no {type_} {name} in the plan"
    return resources


def _failed(resources) -> set[str]:
    return {v.policy for v in rules.check_all(resources)}


def _ray_spec(props):
    return props["spec"]["rayClusterConfig"]


def _set_cni_off(props):
    props["vpcCniOptions"]["enableNetworkPolicy"] = False


MUTATIONS = {
    "nodes-require-imdsv2": (rules.MANAGED_NODE_GROUP, lambda p: p.update(enableIMDSv2=False)),
    "nodes-in-private-subnets": (rules.EKS_CLUSTER, lambda p: p.update(nodeAssociatePublicIpAddress=True)),
    "gpu-pools-efa-one-zone": (rules.MANAGED_NODE_GROUP, lambda p: p.update(enableEfaSupport=False), "prefill-gpu"),
    "api-endpoint-restricted": (
        rules.EKS_CLUSTER,
        # 0.0.0.0/0 in two halves: the rule counts the addresses the blocks reach together.
        lambda p: p.update(
            publicAccessCidrs=["0.0.0.0/1", "128.0.0.0/1"], clusterTags={rules.ENVIRONMENT_TAG: "production"}
        ),
    ),
    "vpc-cni-network-policy": (rules.EKS_CLUSTER, _set_cni_off),
    "ray-network-policies": (
        rules.NETWORK_POLICY,
        lambda p: p["spec"].update(ingress=[{"from": [{"namespaceSelector": {}}]}]),
        "llm-network-policies-default-deny-ingress",
    ),
    "ray-egress-except-instance-metadata": (
        rules.NETWORK_POLICY,
        lambda p: p["spec"]["egress"][0]["to"][0]["ipBlock"].pop("except"),
        "llm-network-policies-egress-except-instance-metadata",
    ),
    "ip-blocks-outside-pod-subnets": (
        rules.NETWORK_POLICY,
        lambda p: p["spec"]["ingress"][0].update({"from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}]}),
        "llm-network-policies-serve-port-from-load-balancer",
    ),
    "namespaces-pod-security": (rules.K8S_NAMESPACE, lambda p: p["metadata"].pop("labels"), "llm-namespace"),
    "privileged-only-efa-workers": (
        rules.RAY_SERVICE,
        lambda p: _ray_spec(p)["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            securityContext={"privileged": True}
        ),
    ),
    "charts-and-images-pinned": (rules.HELM_RELEASE, lambda p: p.update(version="^1.7"), "kuberay-operator"),
    "images-by-digest": (
        rules.RAY_SERVICE,
        lambda p: (
            _ray_spec(p)["headGroupSpec"]["template"]["spec"]["containers"][0].update(
                image="763104351884.dkr.ecr.us-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0.0"
            ),
            p["metadata"]["annotations"].update({rules.ENVIRONMENT_ANNOTATION: "staging"}),
        ),
    ),
    "ray-token-auth": (rules.RAY_SERVICE, lambda p: _ray_spec(p).pop("authOptions")),
    "endpoint-requires-api-key": (
        rules.RAY_SERVICE,
        lambda p: (
            p["spec"].update(serveConfigV2=p["spec"]["serveConfigV2"].replace("api_key_ingress:", "other:")),
            p["metadata"]["annotations"].update({rules.ENVIRONMENT_ANNOTATION: "staging"}),
        ),
    ),
    "no-plaintext-secrets": (
        rules.RAY_SERVICE,
        lambda p: _ray_spec(p)["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            env=[{"name": "HF_TOKEN", "value": "hf_plain"}]
        ),
    ),
}


@pytest.mark.parametrize("policy", sorted(MUTATIONS))
def test_each_policy_fails_when_its_guard_is_off(dev, policy):
    type_, change, *name = MUTATIONS[policy]
    assert _failed(_mutated(dev, type_, change, *name)) == {policy}


def test_a_token_path_passes_only_inside_a_secret_volume(dev):
    """HF_TOKEN_PATH names a file mounted from the hf-token Secret: a literal path, no secret in it. A path outside
    the Secret's mount, or inside a volume that is no Secret, fails."""

    def head(spec: dict) -> dict:
        return _ray_spec(spec)["headGroupSpec"]["template"]["spec"]

    def with_token_file(path: str, source: dict | None = None):
        def change(spec: dict) -> None:
            pod = head(spec)
            pod.setdefault("volumes", []).append(
                {"name": "hf-token", **(source or {"secret": {"secretName": "hf-token"}})}
            )
            container = pod["containers"][0]
            container.setdefault("volumeMounts", []).append(
                {"name": "hf-token", "mountPath": "/etc/t", "readOnly": True}
            )
            container["env"] = [{"name": "HF_TOKEN_PATH", "value": path}]

        return change

    assert _failed(_mutated(dev, rules.RAY_SERVICE, with_token_file("/etc/t/HF_TOKEN"))) == set()
    assert _failed(_mutated(dev, rules.RAY_SERVICE, with_token_file("/tmp/HF_TOKEN"))) == {"no-plaintext-secrets"}
    not_a_secret = with_token_file("/etc/t/HF_TOKEN", {"emptyDir": {}})
    assert _failed(_mutated(dev, rules.RAY_SERVICE, not_a_secret)) == {"no-plaintext-secrets"}


def test_a_node_launch_template_with_hop_limit_2_fails(dev):
    """pulumi-eks's own hop limit (2, under enableIMDSv2) is what the node groups' transform replaces."""
    hop_two = _mutated(dev, rules.AWS_LAUNCH_TEMPLATE, lambda p: p["metadataOptions"].update(httpPutResponseHopLimit=2))
    found = rules.check_all(hop_two)
    assert {v.policy for v in found} == {"nodes-require-imdsv2"}
    assert "httpPutResponseHopLimit is 2, must be 1" in found[0].message


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spec"].update(policyTypes=["Ingress"]),  # no policy governs egress any more
        lambda p: p["spec"]["egress"].append({"ports": [{"port": 80}]}),  # any destination on port 80
        lambda p: p["spec"]["egress"][0]["to"][0]["ipBlock"].update(cidr="169.254.0.0/16", **{"except": []}),
    ],
)
def test_the_egress_policy_fails_when_it_lets_the_instance_metadata_through(dev, change):
    mutated = _mutated(dev, rules.NETWORK_POLICY, change, "llm-network-policies-egress-except-instance-metadata")
    assert _failed(mutated) == {"ray-egress-except-instance-metadata"}


def test_every_policy_has_a_failing_case_here():
    # the latter two: their own tests below
    covered = {*MUTATIONS, "load-balancer-source-ranges", "observability-outside-dev"}
    assert covered == {p.name for p in rules.policies()}


def test_a_ray_service_without_the_key_check_passes_only_in_a_dev_environment():
    open_dev = run_program("dev", {"ray-llm-eks:apiKeyCheck": False})
    assert _failed(plan_resources(open_dev)) == set()
    # The same RayService claiming another environment is refused.
    staged = _mutated(
        open_dev,
        rules.RAY_SERVICE,
        lambda p: p["metadata"]["annotations"].update({rules.ENVIRONMENT_ANNOTATION: "production"}),
    )
    assert _failed(staged) == {"endpoint-requires-api-key"}


def test_dashboard_opened_beyond_the_operator_fails(dev):
    def widen(props):
        expression = props["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]
        expression["values"] = ["kuberay-system", "default"]

    resources = _mutated(dev, rules.NETWORK_POLICY, widen, "llm-network-policies-dashboard-from-kuberay-operator")
    found = rules.check_all(resources)
    assert [v.policy for v in found] == ["ray-network-policies"] and "['8265']" in found[0].message


def test_pd_pools_in_two_subnets_fail(dev):
    resources = _mutated(dev, rules.MANAGED_NODE_GROUP, lambda p: p.update(subnetIds=["subnet-b"]), "decode-gpu")
    messages = [str(v) for v in rules.check_all(resources)]
    assert any("gpu-pools-efa-one-zone" in m and "share one subnet" in m for m in messages), messages


def test_collocated_pool_needs_no_efa(plans):
    """The baseline's pool is not a PD pool (it moves no KV cache between nodes): EFA off there is no violation."""
    pools = [r for r in plan_resources(plans["baseline"]) if r.type == rules.MANAGED_NODE_GROUP]
    assert any(
        r.props.get("labels", {}).get(POOL_NODE_LABEL) == "collocated" and not r.props.get("enableEfaSupport")
        for r in pools
    )
    assert violations(plans["baseline"]) == []


def test_plaintext_secret_data_fails_offline_only():
    secret = rules.Resource(rules.K8S_SECRET, "s", "urn:s", {"stringData": {"HF_TOKEN": "hf_plain"}})
    assert [v.policy for v in rules.check_all([secret])] == ["no-plaintext-secrets"]
    # CrossGuard decrypts secrets before policies see them: there the check cannot tell, and is skipped.
    assert rules.check_all([secret], secrets_marked=False) == []
    marked = replace(secret, props={"stringData": {"HF_TOKEN": rules.SECRET_MARKER}})
    assert rules.check_all([marked]) == []


def test_load_balancer_without_ranges_fails(dev):
    service = {"metadata": {"name": "open", "namespace": "llm"}, "spec": {"type": "LoadBalancer"}}
    resources = [*plan_resources(dev), rules.Resource(rules.K8S_SERVICE, "open", "urn:open", service)]
    assert _failed(resources) == {"load-balancer-source-ranges"}


def test_load_balancer_ranges_holding_pod_addresses_fail(dev):
    """The NLB's source ranges are its security group's rules and the pods admit the NLB: a range over
    a private subnet lets every pod through, whatever serveClientNamespaces says."""

    def widen(props):
        props["spec"]["loadBalancerSourceRanges"] = ["10.0.0.0/16"]

    found = rules.check_all(_mutated(dev, rules.K8S_SERVICE, widen, "internal-endpoint"))
    assert [(v.policy, v.message) for v in found] == [
        (
            "ip-blocks-outside-pod-subnets",
            "loadBalancerSourceRanges 10.0.0.0/16 holds pod addresses (subnets 10.0.0.0/18, 10.0.64.0/18)",
        )
    ]


def test_open_load_balancer_ranges_fail():
    service = {"spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8", "0.0.0.0/0"]}}
    found = rules.check_all([rules.Resource(rules.K8S_SERVICE, "lb", "urn:lb", service)])
    assert [v.policy for v in found] == ["load-balancer-source-ranges"]
    assert "0.0.0.0/0" in found[0].message


def test_vpc_cni_addon_under_the_cli():
    """With the CLI the rules see pulumi-eks's children too: the vpc-cni add-on's configuration."""
    on = {"addonName": "vpc-cni", "configurationValues": json.dumps({"enableNetworkPolicy": "true"})}
    off = {"addonName": "vpc-cni", "configurationValues": json.dumps({"env": {}})}
    assert rules.check_all([rules.Resource(rules.AWS_ADDON, "cni", "urn:cni", on)]) == []
    found = rules.check_all([rules.Resource(rules.AWS_ADDON, "cni", "urn:cni", off)])
    assert [v.policy for v in found] == ["vpc-cni-network-policy"]


def test_switching_network_policies_off_in_a_stack_fails_naming_the_policies():
    plan = run_program("dev", {"ray-llm-eks:networkPolicies": False})
    assert {v.policy for v in violations(plan)} == {
        "ray-network-policies",
        "ray-egress-except-instance-metadata",
        "vpc-cni-network-policy",
    }
    assert any("ray-network-policies" in str(v) and "default-deny" in str(v) for v in violations(plan))


def test_crossguard_adapters_report_what_the_rules_find():
    """policy/__main__.py hands these to pulumi-policy; its args carry the same fields."""
    rule = {p.name: p for p in rules.policies()}
    reported = []
    group = SimpleNamespace(
        resource_type=rules.MANAGED_NODE_GROUP, name="g", urn="urn:g", props={"enableIMDSv2": False}
    )
    resource_validator(rule["nodes-require-imdsv2"])(group, lambda m, urn=None: reported.append((m, urn)))
    assert reported and "enableIMDSv2" in reported[0][0]

    reported.clear()
    service = SimpleNamespace(
        resource_type=rules.RAY_SERVICE, name="llm", urn="urn:llm", props={"metadata": {"namespace": "llm"}}
    )
    stack_validator(rule["ray-network-policies"])(
        SimpleNamespace(resources=[service]), lambda m, urn=None: reported.append((m, urn))
    )
    assert reported == [("namespace llm has no default-deny ingress NetworkPolicy", "urn:llm")]


def test_privileged_chart_values_fail():
    values = {"daemonset": {"containers": [{"securityContext": {"privileged": True}}]}}
    release = rules.Resource(rules.HELM_RELEASE, "x", "urn:x", {"version": "1.2.3", "chart": "x", "values": values})
    assert [v.policy for v in rules.check_all([release])] == ["privileged-only-efa-workers"]


def test_a_pd_pool_is_known_by_the_role_it_serves_not_its_name():
    """Roles as data: pool `prefill-b` serving prefill (its workers advertise pool_prefill) is a PD pool."""
    group = {"resources": {"pool_prefill": "1"}, "template": {"spec": {"nodeSelector": {POOL_NODE_LABEL: "prefill-b"}}}}
    service = rules.Resource(
        rules.RAY_SERVICE, "llm", "urn:llm", {"spec": {"rayClusterConfig": {"workerGroupSpecs": [group]}}}
    )
    pool = {
        "labels": {POOL_NODE_LABEL: "prefill-b"},
        "subnetIds": ["subnet-a"],
        "placementGroupAvailabilityZone": "us-east-1a",
    }
    nodes = rules.Resource(rules.MANAGED_NODE_GROUP, "prefill-b-gpu", "urn:nodes", {**pool, "enableEfaSupport": False})
    found = [v for v in rules.check_all([service, nodes]) if v.policy == "gpu-pools-efa-one-zone"]
    assert [v.message for v in found] == [
        "PD pool prefill-b must set enableEfaSupport (NIXL moves the KV cache over EFA)"
    ]
    assert [v for v in rules.check_all([nodes]) if v.policy == "gpu-pools-efa-one-zone"] == []  # unknown role


def test_the_pack_imports_the_facts_module_with_the_standard_library_alone():
    """The pack runs in its own venv and under the Pulumi CLI from policy/: what it takes from the
    program is ray_llm_eks/domain/core/facts.py, which must import with no site-packages at all (-S) and pull in no
    other module of the program."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import ray_llm_eks.domain.core.facts; "
        "print(sorted(m for m in sys.modules if m.startswith(('ray_llm_eks', 'yaml'))))"
    )
    run = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        "['ray_llm_eks',",
        "'ray_llm_eks.domain',",
        "'ray_llm_eks.domain.core',",
        "'ray_llm_eks.domain.core.facts']",
    ]


def test_unwatched_rayservice_outside_dev_is_advised_not_blocked():
    """observability none in production: advisory (reported, `make policy` still passes); in dev: silent."""
    prod_none = run_program("prod", {"ray-llm-eks:observability": {"mode": "none"}})
    found = violations(prod_none)
    assert [(v.policy, v.advisory) for v in found] == [("observability-outside-dev", True)]
    assert "no PodMonitor selects its head and worker pods in namespace llm" in found[0].message
    assert "(advisory)" in str(found[0])
    assert violations(run_program("dev", {"ray-llm-eks:observability": {"mode": "none"}})) == []


def test_metrics_ports_opened_beyond_prometheus_fail(dev):
    """Prometheus's namespace may reach the metrics ports; another namespace, or another port, may not."""

    def widen(props):
        expression = props["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]
        expression["values"] = ["monitoring", "default"]

    found = rules.check_all(_mutated(dev, rules.NETWORK_POLICY, widen, "llm-network-policies-metrics-from-prometheus"))
    assert [v.policy for v in found] == ["ray-network-policies"] and "['44217', '44227', '8080']" in found[0].message

    def gcs(props):
        props["spec"]["ingress"][0]["ports"].append({"port": 6379, "protocol": "TCP"})

    found = rules.check_all(_mutated(dev, rules.NETWORK_POLICY, gcs, "llm-network-policies-metrics-from-prometheus"))
    assert [v.policy for v in found] == ["ray-network-policies"]


@pytest.fixture(scope="module")
def karpenter_plan():
    from tests.plan.components.test_karpenter_plan import KARPENTER

    return run_program("dev", KARPENTER)


def test_a_karpenter_stack_passes_every_policy(karpenter_plan):
    assert violations(karpenter_plan) == []


def _first_zone_requirement(props):
    return next(r for r in props["spec"]["template"]["spec"]["requirements"] if r["key"] == rules.ZONE_REQUIREMENT)


@pytest.mark.parametrize(
    ("type_", "change", "policy", "says"),
    [
        (
            rules.KARPENTER_NODE_CLASS,
            lambda p: p["spec"].update(networkInterfaces=[p["spec"]["networkInterfaces"][0]]),
            "gpu-pools-efa-one-zone",
            "EFA interface",
        ),
        (
            rules.KARPENTER_NODE_CLASS,
            lambda p: p["spec"].pop("placementGroupSelector"),
            "gpu-pools-efa-one-zone",
            "placementGroupSelector",
        ),
        (
            rules.KARPENTER_NODE_CLASS,
            lambda p: p["spec"]["subnetSelectorTerms"].append({"tags": {"Name": "another"}}),
            "gpu-pools-efa-one-zone",
            "exactly one subnet",
        ),
        (
            rules.KARPENTER_NODE_POOL,
            lambda p: _first_zone_requirement(p)["values"].append("us-east-1b"),
            "gpu-pools-efa-one-zone",
            "exactly one zone",
        ),
        (
            rules.KARPENTER_NODE_POOL,
            lambda p: _first_zone_requirement(p).update(values=["us-east-1b"]),
            "gpu-pools-efa-one-zone",
            "share one zone",
        ),
        (
            rules.KARPENTER_NODE_CLASS,
            lambda p: p["spec"]["metadataOptions"].update(httpPutResponseHopLimit=2),
            "nodes-require-imdsv2",
            "httpPutResponseHopLimit is 2, must be 1",
        ),
    ],
)
def test_a_karpenter_pd_pool_without_efa_one_zone_or_hop_limit_1_fails(karpenter_plan, type_, change, policy, says):
    name = "karpenter-decode-class" if type_ == rules.KARPENTER_NODE_CLASS else "karpenter-decode-pool"
    found = rules.check_all(_mutated(karpenter_plan, type_, change, name))
    assert {v.policy for v in found} == {policy}
    assert any(says in v.message for v in found), [v.message for v in found]


@pytest.fixture(scope="module")
def auto_mode_plan():
    from tests.plan.components.test_auto_mode_plan import AUTO

    return run_program("dp", AUTO)


def test_an_auto_mode_stack_passes_every_policy(auto_mode_plan):
    assert violations(auto_mode_plan) == []


def test_a_pd_pool_on_an_auto_mode_node_class_fails(auto_mode_plan):
    """Its NodeClass gives the nodes neither EFA nor a placement group: a pool serving prefill may not use it."""

    def serve_prefill(props):
        props["spec"]["template"]["metadata"]["labels"][POOL_NODE_LABEL] = "prefill"

    found = rules.check_all(_mutated(auto_mode_plan, rules.KARPENTER_NODE_POOL, serve_prefill))
    assert [(v.policy, v.message) for v in found] == [
        (
            "gpu-pools-efa-one-zone",
            "PD pool prefill must not run on an EKS Auto Mode NodeClass (no EFA, no placement group)",
        )
    ]


def test_the_public_endpoint_rule_counts_the_addresses_the_blocks_reach_together():
    def cluster(cidrs):
        props = {"endpointPublicAccess": True, "publicAccessCidrs": cidrs}
        return rules.Resource(
            rules.EKS_CLUSTER, "eks", "urn:eks", {**props, "clusterTags": {rules.ENVIRONMENT_TAG: "staging"}}
        )

    policy = next(p for p in rules.policies() if p.name == "api-endpoint-restricted")
    assert policy.check([cluster(["203.0.113.0/24", "198.51.100.0/24"])]) == []
    for wide in (["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["44.0.0.0/7"]):
        (violation,) = policy.check([cluster(wide)])
        assert "more than one /8" in violation.message, wide
