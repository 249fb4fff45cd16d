"""Observability in the graph (ray_llm_eks/components/observability.py): what the dev plan declares, the order
`up` creates it and `destroy` removes it, and the amp, external and none modes."""

from __future__ import annotations

import json

import pytest
import yaml

from offline.mocks import is_placeholder
from offline.plan import Plan, run_program
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.telemetry import observability
from tests.conftest import ROOT, failing_run

NS = "ray-llm-eks:"
RELEASE = "kubernetes:helm.sh/v3:Release"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
ADDON = "aws:eks/addon:Addon"
VOLUME = "aws:ebs/volume:Volume"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
MNG = "eks:index:ManagedNodeGroup"


def head_container(plan: Plan) -> dict:
    spec = plan.one(RAY_SERVICE).inputs["spec"]
    return spec["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]


# ---- the dev plan holds it all


def test_dev_plan_holds_the_prometheus_stack_on_the_system_node(dev):
    stack = dev.one(RELEASE, "kube-prometheus-stack").inputs
    assert (stack["chart"], stack["version"], stack["namespace"]) == ("kube-prometheus-stack", "88.5.3", "monitoring")
    assert stack["repositoryOpts"]["repo"] == "https://prometheus-community.github.io/helm-charts"
    values = stack["values"]
    for path in (("prometheus", "prometheusSpec"), ("alertmanager", "alertmanagerSpec"), ("grafana",)):
        node = values
        for key in path:
            node = node[key]
        assert node["nodeSelector"] == {POOL_NODE_LABEL: "system"}, path
    spec = values["prometheus"]["prometheusSpec"]
    assert (spec["retention"], spec["retentionSize"]) == ("15d", "16GiB")
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["volumeName"] == dev.one(PV).inputs["metadata"]["name"] == "kube-prometheus-stack-prometheus-data"
    assert claim["resources"]["requests"]["storage"] == "20Gi" and claim["storageClassName"] == "gp3"
    # Ray's dashboard embeds Grafana's panels: embedding allowed; a login needed unless grafanaAnonymous.
    assert values["grafana"]["grafana.ini"]["security"] == {"allow_embedding": True}
    assert values["grafana"]["grafana.ini"]["auth.anonymous"] == {"enabled": False, "org_role": "Viewer"}
    opened = run_program("dev", {NS + "observability": {"mode": "embedded", "grafanaAnonymous": True}})
    ini = opened.one(RELEASE, "kube-prometheus-stack").inputs["values"]["grafana"]["grafana.ini"]
    assert ini["auth.anonymous"] == {"enabled": True, "org_role": "Viewer"}
    assert "adminPassword" not in json.dumps(values)  # the chart generates it into a Secret


def test_dev_plan_holds_pod_monitors_for_head_and_workers(dev):
    monitors = {m.inputs["metadata"]["name"]: m.inputs for m in dev.of_type(POD_MONITOR)}
    assert set(monitors) == {"ray-head", "ray-workers"}
    for monitor in monitors.values():
        assert monitor["metadata"]["namespace"] == "llm"
        assert monitor["metadata"]["labels"] == {
            "release": "kube-prometheus-stack"
        }  # what the chart's Prometheus selects
    head_ports = {p["name"] for p in head_container(dev)["ports"]}
    assert {e["port"] for e in monitors["ray-head"]["spec"]["podMetricsEndpoints"]} <= head_ports
    # The KubeRay operator's metrics (RayService readiness) through a ServiceMonitor in its namespace.
    operator = dev.one(SERVICE_MONITOR).inputs
    assert operator["metadata"]["namespace"] == "kuberay-system"
    assert operator["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}}


def test_dev_plan_holds_the_dcgm_exporter_on_gpu_nodes_only(dev):
    dcgm = dev.one(RELEASE, "dcgm-exporter").inputs
    assert (dcgm["chart"], dcgm["version"]) == ("dcgm-exporter", "4.8.2")
    assert dcgm["repositoryOpts"]["repo"] == "https://nvidia.github.io/dcgm-exporter/helm-charts"
    values = dcgm["values"]
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    gpu_taints = {t["key"] for g in dev.of_type(MNG) for t in g.inputs.get("taints") or []}
    assert {t["key"] for t in values["tolerations"]} == gpu_taints == {"nvidia.com/gpu"}
    assert values["serviceMonitor"]["additionalLabels"] == {"release": "kube-prometheus-stack"}


def test_dev_plan_holds_the_alert_rule_and_the_dashboards(dev):
    (rule,) = dev.of_type(RULE)
    assert rule.inputs["metadata"]["namespace"] == "llm"
    assert rule.inputs["metadata"]["labels"] == {"release": "kube-prometheus-stack"}
    maps = {c.inputs["metadata"]["name"]: c.inputs for c in dev.of_type(CONFIG_MAP)}
    dashboards = {n: m for n, m in maps.items() if m["metadata"].get("labels") == observability.DASHBOARD_LABEL}
    assert {"dashboard-ray-serve-llm", "dashboard-ray-serve", "dashboard-ray-default", "dashboard-endpoint"} <= set(
        dashboards
    )
    llm = json.loads(dashboards["dashboard-ray-serve-llm"]["data"]["ray-serve-llm.json"])
    titles = [p["title"] for p in llm["panels"]]
    assert any("NIXL" in t for t in titles), titles  # Ray's LLM dashboard with its NIXL panels
    assert llm["uid"] == "rayServeLlmDashboard"  # what the head's embedded panels link to


def test_the_rule_carries_the_stacks_alerts(dev):
    """The PrometheusRule is ray_llm_eks/domain/telemetry/alerts.py's spec for this stack, the NIXL alert among its
    alerts."""
    from ray_llm_eks.adapters import stack
    from ray_llm_eks.domain.render import alert_rules
    from ray_llm_eks.domain.telemetry import alerts

    (rule,) = dev.of_type(RULE)
    assert rule.inputs["spec"] == alert_rules.prometheus_rule_spec(stack.load_settings(stack.stack_file("dev", ROOT)))
    assert "NixlTransferFailed" in alerts.alert_names(rule.inputs["spec"])


def test_the_ray_head_finds_grafana_and_prometheus(dev):
    env = {e["name"]: e.get("value") for e in head_container(dev)["env"]}
    values = dev.one(RELEASE, "kube-prometheus-stack").inputs["values"]
    assert "grafana" in values and values["grafana"].get("enabled", True)
    assert env["RAY_GRAFANA_HOST"] == "http://kube-prometheus-stack-grafana.monitoring.svc:80"
    assert env["RAY_GRAFANA_IFRAME_HOST"] == "http://127.0.0.1:3000"
    assert dev.outputs["grafanaPortForwardCommand"] == (
        "kubectl -n monitoring port-forward svc/kube-prometheus-stack-grafana 3000:80"
    )


def test_prometheus_volume_sits_in_the_system_nodes_zone(dev):
    volume = dev.one(VOLUME).inputs
    assert (volume["type"], volume["size"], volume["encrypted"]) == ("gp3", 20, True)
    assert volume["availabilityZone"] == dev.outputs["gpuAvailabilityZone"] == "us-east-1a"
    system = dev.one(MNG, "eks-system").inputs
    gpu = dev.one(MNG, "prefill-gpu").inputs
    assert system["subnetIds"] == gpu["subnetIds"]  # the GPU zone's subnet
    pv = dev.one(PV).inputs["spec"]
    assert pv["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["us-east-1a"]
    assert pv["persistentVolumeReclaimPolicy"] == "Retain"  # Pulumi deletes the EBS volume, not the driver
    assert is_placeholder(pv["csi"]["volumeHandle"])  # the volume's id, known after deploy
    claim = dev.one(PVC).inputs
    assert (claim["metadata"]["namespace"], claim["metadata"]["name"]) == (
        "monitoring",
        "prometheus-kube-prometheus-stack-prometheus-db-prometheus-kube-prometheus-stack-prometheus-0",
    )
    assert pv["claimRef"] == {"namespace": "monitoring", "name": claim["metadata"]["name"]}


# ---- create order, and destroy in reverse


def test_destroy_removes_prometheus_storage_before_the_csi_driver(dev):
    """Destroy runs the dependencies backwards: the chart (and so the Prometheus pod) first, then the
    claim, the PersistentVolume, the EBS volume; the CSI driver, which detaches it, only after."""
    csi = dev.one(ADDON, "ebs-csi").urn
    volume, pv, claim = dev.one(VOLUME).urn, dev.one(PV).urn, dev.one(PVC).urn
    stack = dev.one(RELEASE, "kube-prometheus-stack").urn
    assert dev.depends_on(volume, csi)
    assert dev.depends_on(pv, volume) and dev.depends_on(claim, pv) and dev.depends_on(stack, claim)
    storage_class = dev.one("kubernetes:storage.k8s.io/v1:StorageClass").urn
    assert dev.depends_on(storage_class, csi)
    # The driver's role reaches it through Pod Identity: the agent outlives the driver.
    assert dev.depends_on(csi, dev.one(ADDON, "pod-identity-agent").urn)
    associations = dev.one(ADDON, "ebs-csi").inputs["podIdentityAssociations"]
    assert [a["serviceAccount"] for a in associations] == ["ebs-csi-controller-sa"]
    # All of it on nodes that outlive it.
    for urn in (csi, volume, stack):
        assert dev.depends_on(urn, dev.one(MNG, "eks-system").urn)


def test_monitors_go_before_the_crds_chart_and_the_namespace_they_live_in(dev):
    stack = dev.one(RELEASE, "kube-prometheus-stack").urn
    namespace = dev.one("kubernetes:core/v1:Namespace", "llm-namespace").urn
    watchers = [*dev.of_type(POD_MONITOR), *dev.of_type(RULE), *dev.of_type(SERVICE_MONITOR)]
    watchers += [c for c in dev.of_type(CONFIG_MAP) if c.name.startswith("service-monitoring-dashboard-")]
    assert len(watchers) >= 8
    for watcher in watchers:
        assert dev.depends_on(watcher.urn, stack), watcher.name
        assert dev.depends_on(watcher.urn, namespace), watcher.name
    # The DCGM exporter's ServiceMonitor needs the chart's CRDs; both run on every GPU node.
    dcgm = dev.one(RELEASE, "dcgm-exporter").urn
    assert dev.depends_on(dcgm, stack)
    for pool in dev.of_type(MNG):
        assert dev.depends_on(stack, pool.urn) and dev.depends_on(dcgm, pool.urn)


# ---- the other modes


def test_amp_writes_to_a_workspace_through_pod_identity(dev):
    plan = run_program("dev", {NS + "observability": {"mode": "amp"}})
    workspace = plan.one("aws:amp/workspace:Workspace")
    assert workspace.inputs["alias"] == "ray-llm-dev"
    values = plan.one(RELEASE, "kube-prometheus-stack").inputs["values"]
    assert values["prometheus"]["agentMode"] is True
    (remote,) = values["prometheus"]["prometheusSpec"]["remoteWrite"]
    assert remote["sigv4"] == {"region": "us-east-1"} and remote["url"].endswith("/api/v1/remote_write")
    assert is_placeholder(remote["url"].removesuffix("/api/v1/remote_write"))  # the workspace's endpoint
    assert values["grafana"] == {"enabled": False} and values["alertmanager"] == {"enabled": False}
    # Prometheus's service account gets a role that may only write to this workspace.
    association = next(
        a
        for a in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["namespace"] == "monitoring"
    )
    assert association.inputs["serviceAccount"] == values["prometheus"]["serviceAccount"]["name"]
    policy = json.loads(plan.one("aws:iam/rolePolicy:RolePolicy", "monitoring-remote-write").inputs["policy"])
    (statement,) = policy["Statement"]
    assert (statement["Effect"], statement["Action"]) == ("Allow", ["aps:RemoteWrite"])
    assert statement["Resource"] == "<known after deploy: aws:amp/workspace:Workspace::monitoring-workspace.arn>"
    # The workspace evaluates the rules; no volume, no CSI driver, no Grafana of ours.
    rules = plan.one("aws:amp/ruleGroupNamespace:RuleGroupNamespace").inputs
    assert yaml.safe_load(rules["data"]) == dev.one(RULE).inputs["spec"]  # the same rules as embedded
    assert plan.of_type(RULE) == [] and plan.of_type(VOLUME) == [] and plan.of_type(PVC) == []
    assert [a.name for a in plan.of_type(ADDON)] == ["pod-identity-agent"]
    assert {m.inputs["metadata"]["name"] for m in plan.of_type(POD_MONITOR)} == {"ray-head", "ray-workers"}
    assert not [c for c in plan.of_type(CONFIG_MAP) if c.name.startswith("service-monitoring-dashboard-")]
    assert "RAY_GRAFANA_HOST" not in {e["name"] for e in head_container(plan).get("env", [])}
    lines = {line["item"]: line for line in plan.outputs["costEstimate"]["lines"]}
    assert lines["AMP samples ingested (10M/h, series budget)"]["usdPerHour"] == pytest.approx(1.08)
    assert "grafanaPortForwardCommand" not in plan.outputs


def test_none_declares_nothing_to_watch_with():
    plan = run_program("dev", {NS + "observability": {"mode": "none"}})
    for type_ in (POD_MONITOR, RULE, SERVICE_MONITOR, VOLUME, PV, PVC, "aws:amp/workspace:Workspace"):
        assert plan.of_type(type_) == [], type_
    assert {r.name for r in plan.of_type(RELEASE)}.isdisjoint({"kube-prometheus-stack", "dcgm-exporter"})
    policies = {p.inputs["metadata"]["name"] for p in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert "metrics-from-prometheus" not in policies
    assert not any(e["name"].startswith("RAY_GRAFANA") for e in head_container(plan).get("env", []))
    assert "EBS gp3 Prometheus volume (GB)" not in {line["item"] for line in plan.outputs["costEstimate"]["lines"]}


def test_embedded_on_an_existing_cluster_is_refused_before_any_resource():
    error, monitor = failing_run({NS + "existingCluster": True, NS + "observability": {"mode": "embedded"}})
    assert "observability.mode = embedded: external or none on an existing cluster" in str(error)
    assert monitor.registrations == []


def test_a_bigger_volume_and_longer_retention_reach_the_chart_and_the_cost():
    plan = run_program("dev", {NS + "observability": {"retentionDays": 30, "storageGiB": 100}})
    spec = plan.one(RELEASE, "kube-prometheus-stack").inputs["values"]["prometheus"]["prometheusSpec"]
    assert (spec["retention"], spec["retentionSize"]) == ("30d", "80GiB")
    assert plan.one(VOLUME).inputs["size"] == 100
    lines = {line["item"]: line for line in plan.outputs["costEstimate"]["lines"]}
    assert lines["EBS gp3 Prometheus volume (GB)"]["quantity"] == 100
    plan = run_program("dev", {NS + "kubePrometheusStackVersion": "88.5.2", NS + "dcgmExporterVersion": "4.8.1"})
    assert plan.one(RELEASE, "kube-prometheus-stack").inputs["version"] == "88.5.2"
    assert plan.one(RELEASE, "dcgm-exporter").inputs["version"] == "4.8.1"


POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _monitoring_policies(plan: Plan) -> dict[str, dict]:
    return {
        p.inputs["metadata"]["name"]: p
        for p in plan.of_type(POLICY)
        if p.inputs["metadata"]["namespace"] == "monitoring"
    }


def test_monitoring_pods_admit_their_namespace_and_the_ray_head_only(dev):
    """Prometheus, Grafana and Alertmanager: ingress from `monitoring`'s own pods, and the Ray head to
    Prometheus's and Grafana's ports (its dashboard queries both); Alertmanager's API from no other
    namespace. In place before the chart's pods start."""
    policies = _monitoring_policies(dev)
    own = {"from": [{"podSelector": {}}]}

    def head_on(port: int) -> dict:
        selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["llm"]}]}
        source = {"namespaceSelector": selector, "podSelector": {"matchLabels": {"ray.io/node-type": "head"}}}
        return {"from": [source], "ports": [{"port": port, "protocol": "TCP"}]}

    expected = {
        "prometheus-from-grafana-and-ray": ({"prometheus": "kube-prometheus-stack-prometheus"}, [own, head_on(9090)]),
        "grafana-from-monitoring-and-ray": (
            {"app.kubernetes.io/name": "grafana", "app.kubernetes.io/instance": "kube-prometheus-stack"},
            [own, head_on(3000)],
        ),
        "alertmanager-from-monitoring": ({"alertmanager": "kube-prometheus-stack-alertmanager"}, [own]),
    }
    assert set(policies) == set(expected)
    release = dev.one(RELEASE, "kube-prometheus-stack")
    for name, (labels, ingress) in expected.items():
        spec = policies[name].inputs["spec"]
        assert spec == {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": ingress}, name
        assert dev.depends_on(release.urn, policies[name].urn), name
    # The ports the Ray head uses are the ones it is given (head_env).
    env = {e["name"]: e["value"] for e in head_container(dev)["env"]}
    assert env["RAY_PROMETHEUS_HOST"].endswith(":9090")


def test_amp_monitoring_policies_cover_the_agent_alone_and_none_without_network_policies():
    amp = _monitoring_policies(run_program("dev", {NS + "observability": {"mode": "amp"}}))
    assert list(amp) == ["prometheus-from-grafana-and-ray"]
    assert amp["prometheus-from-grafana-and-ray"].inputs["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert _monitoring_policies(run_program("dev", {NS + "networkPolicies": False})) == {}
