"""Hardened defaults (ray_llm_eks/domain/security/hardening.py, ray_llm_eks/domain/security/network_policies.py): what
the dev plan declares, and the environment rule for the public API endpoint, refused before any resource exists."""

from __future__ import annotations

import pytest

from ray_llm_eks.domain.security import pod_security

# Imported at collection, not inside a test after plans ran: importing a test module parses it (pytest's
# assertion rewrite). Inside a test it failed once with "SystemError: AST constructor recursion depth
# mismatch": likely a collection during the parse ran a failed plan's leftover future, whose logged
# traceback is parsed too (3.11's caret anchors), and CPython 3.11 keeps one AST depth counter.
from tests.plan.components.test_preflight import EVERYWHERE, ROOMY, aws_run


def _network_policies(plan) -> dict[str, dict]:
    """The Ray namespace's (the monitoring namespace's are tests/plan/components/test_observability_graph.py's)."""
    return {
        r.inputs["metadata"]["name"]: r.inputs
        for r in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if r.inputs["metadata"]["namespace"] == "llm"
    }


def test_dev_plan_declares_the_network_policies_and_the_cni_agent(dev):
    policies = _network_policies(dev)
    assert sorted(policies) == [
        "dashboard-from-kuberay-operator",
        "default-deny-ingress",
        "egress-except-instance-metadata",
        # ray_llm_eks/domain/telemetry/observability.py: the PodMonitors' ports, from its namespace only
        "metrics-from-prometheus",
        "ray-pods-to-ray-pods",
        "serve-port-from-load-balancer",
    ]
    (scrape,) = policies["metrics-from-prometheus"]["spec"]["ingress"]
    assert scrape["ports"] == [{"port": p, "protocol": "TCP"} for p in (8080, 44217, 44227)]
    assert scrape["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    # The operator manages Serve through the head's dashboard API: that port, from its namespace only.
    operator = policies["dashboard-from-kuberay-operator"]["spec"]
    assert operator["podSelector"] == {"matchLabels": {"ray.io/node-type": "head"}}
    (rule,) = operator["ingress"]
    assert rule["ports"] == [{"port": 8265, "protocol": "TCP"}]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kuberay-system"]
    deny = policies["default-deny-ingress"]
    assert deny["metadata"]["namespace"] == "llm" and deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    cluster = dev.one("eks:index:Cluster")
    assert cluster.inputs["vpcCniOptions"]["enableNetworkPolicy"] is True
    assert cluster.inputs["clusterTags"] == {"ray-llm-eks:environment": "dev"}
    # The RayService (and so every Ray pod) waits for the policies.
    service = dev.one("kubernetes:ray.io/v1:RayService")
    for policy in dev.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy"):
        if policy.inputs["metadata"]["namespace"] == "llm":
            assert dev.depends_on(service.urn, policy.urn)


def test_client_namespaces_reach_the_serve_port_only(dev):
    from offline.plan import run_program

    plan = run_program("dev", {"ray-llm-eks:serveClientNamespaces": ["apps", "gateway"]})
    serve = _network_policies(plan)["serve-port-from-clients"]["spec"]["ingress"]
    assert serve[0]["ports"] == [{"port": 8000, "protocol": "TCP"}]
    selector = serve[0]["from"][0]["namespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["apps", "gateway"]


def test_no_container_outside_efa_workers_is_privileged(plans):
    unprivileged = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},  # NET_RAW and the runtime's other defaults
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for plan in plans.values():
        spec = plan.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]
        head_pod = spec["headGroupSpec"]["template"]["spec"]
        assert head_pod["containers"][0]["securityContext"] == unprivileged
        # The head keeps its token only for KubeRay's autoscaler sidecar, which calls the API.
        autoscales = spec["enableInTreeAutoscaling"]
        assert head_pod.get("automountServiceAccountToken", True) is autoscales
        for group in spec["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            worker = pod["containers"][0]
            efa = "vpc.amazonaws.com/efa" in worker["resources"]["limits"]
            assert worker["securityContext"].get("privileged", False) is efa, group["groupName"]
            assert pod["automountServiceAccountToken"] is False, group["groupName"]
            if not efa:  # the collocated worker
                assert worker["securityContext"] == unprivileged, group["groupName"]
            (init,) = pod["initContainers"]  # root, to open the node cache, and nothing else
            assert init["securityContext"] == {"runAsUser": 0, **unprivileged}, group["groupName"]


def test_head_token_follows_the_autoscaler():
    """A stack whose replicas autoscale runs KubeRay's autoscaler in the head pod: the token stays there."""
    from offline.plan import run_program

    spec = run_program("xpyd").one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]
    assert spec["enableInTreeAutoscaling"] is True
    assert "automountServiceAccountToken" not in spec["headGroupSpec"]["template"]["spec"]


def test_ebs_encryption_off_in_the_region_is_refused_at_deploy_time():
    from ray_llm_eks.domain.checks import preflight

    monitor, run = aws_run(EVERYWHERE, ROOMY, ebs_encrypted=False)
    with pytest.raises(preflight.PreflightError) as caught:
        run()
    assert "requireEbsEncryption = true: false, or EBS encryption by default on in us-east-1 (it is off" in str(
        caught.value
    )
    assert "aws ec2 enable-ebs-encryption-by-default --region us-east-1" in str(caught.value)
    assert monitor.registrations == []

    _, run = aws_run(EVERYWHERE, ROOMY, ebs_encrypted=False, overrides={"ray-llm-eks:requireEbsEncryption": False})
    assert "skipped (requireEbsEncryption: false)" in run().outputs["preflightChecks"][-1]
    _, run = aws_run(EVERYWHERE, ROOMY)
    assert run().outputs["preflightChecks"][-1] == (
        "ok: EBS encryption by default is on in us-east-1 (node root volumes encrypted)"
    )


def test_every_namespace_the_stack_creates_carries_pod_security_labels(plans):
    """Enforce at the level its pods need (privileged where hostPath, EFA or host access force it),
    warn and audit one level stricter; the e2e checks the API server enforces them."""
    expected = {
        "llm": ("privileged", "baseline"),  # the model cache's hostPath, privileged or IPC_LOCK EFA workers
        "monitoring": ("privileged", "baseline"),  # node-exporter's host namespaces, DCGM's SYS_ADMIN
        "kuberay-system": ("baseline", "restricted"),  # restricted warned until a deploy of the pinned chart shows it
    }
    for stack, plan in plans.items():
        namespaces = {
            n.inputs["metadata"]["name"]: n.inputs["metadata"] for n in plan.of_type("kubernetes:core/v1:Namespace")
        }
        assert namespaces and set(namespaces) <= set(expected), stack
        # The table the e2e judges the live namespaces by is these plans' (e2e/admission.py).
        table = pod_security.namespaces("llm")
        assert {name: table[name][0] for name in namespaces} == {name: expected[name][0] for name in namespaces}
        for name, meta in namespaces.items():
            enforce, stricter = expected[name]
            assert meta["labels"] == {
                "pod-security.kubernetes.io/enforce": enforce,
                "pod-security.kubernetes.io/warn": stricter,
                "pod-security.kubernetes.io/audit": stricter,
            }, (stack, name)


def test_ray_pods_reach_everything_but_the_instance_metadata(dev):
    egress = _network_policies(dev)["egress-except-instance-metadata"]["spec"]
    assert egress["podSelector"] == {} and egress["policyTypes"] == ["Egress"]
    assert egress["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}]}]


def test_the_ray_cluster_requires_rays_token_from_a_secret_made_before_it(plans):
    """Ray's token authentication (ray_llm_eks/domain/security/ray_auth.py): the dashboard, its job and Serve REST
    APIs and the GCS answer only with it; the token is random, a Pulumi secret, in the Secret authOptions names,
    which exists before the RayService (KubeRay puts it into every Ray container)."""
    for stack, plan in plans.items():
        service = plan.one("kubernetes:ray.io/v1:RayService")
        assert service.inputs["spec"]["rayClusterConfig"]["authOptions"] == {
            "mode": "token",
            "secretName": "ray-auth-token",
        }, stack
        secret = plan.one("kubernetes:core/v1:Secret", "llm-ray-auth-token")
        assert secret.inputs["metadata"]["name"] == "ray-auth-token"
        assert secret.inputs["stringData"] == "[secret]", stack  # never the token in the plan
        assert plan.depends_on(service.urn, secret.urn), stack
        token = plan.one("random:index/randomPassword:RandomPassword", "llm-ray-auth-token")
        assert token.inputs["length"] >= 32 and token.inputs["special"] is False
        assert plan.outputs["dashboardTokenCommand"].startswith("kubectl -n llm get secret ray-auth-token")


def test_the_dashboard_admits_the_kuberay_operators_own_pods_only(dev):
    policies = {
        r.inputs["metadata"]["name"]: r.inputs for r in dev.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }
    (rule,) = policies["dashboard-from-kuberay-operator"]["spec"]["ingress"]
    (source,) = rule["from"]
    assert source["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}}
    assert source["namespaceSelector"]["matchExpressions"][0]["values"] == ["kuberay-system"]
    assert rule["ports"] == [{"port": 8265, "protocol": "TCP"}]


def test_an_image_whose_ray_has_no_token_authentication_is_refused():
    from tests.conftest import settings_error

    error = settings_error({"ray-llm-eks:image": "registry.example.com/ray:old", "ray-llm-eks:rayVersion": "2.51.1"})
    assert "rayVersion = 2.51.1: Ray 2.52.0 or later: token authentication of the dashboard and GCS" in str(error)


def test_a_ray_token_of_the_users_own_replaces_the_random_one_and_a_short_one_is_refused_unshown():
    from offline.plan import run_program
    from ray_llm_eks.adapters.stackfile import SecretValue
    from tests.conftest import failing_run

    token = "t" * 40
    plan = run_program("dev", {"ray-llm-eks:rayAuthToken": SecretValue(token)})
    assert "llm-ray-auth-token" not in {r.name for r in plan.of_type("random:index/randomPassword:RandomPassword")}
    secret = plan.one("kubernetes:core/v1:Secret", "llm-ray-auth-token")
    assert secret.inputs["stringData"] == "[secret]" and token not in str(plan.registrations)
    error, _ = failing_run({"ray-llm-eks:rayAuthToken": SecretValue("short token")})
    assert "rayAuthToken = (not shown): at least 32 printable characters without blanks" in str(error)
    assert "short token" not in str(error)
