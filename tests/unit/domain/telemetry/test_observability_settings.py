"""ray_llm_eks/domain/telemetry/observability.py on its own: the `observability` setting, what the monitoring takes from
the nodes, and every value we hand the pinned charts and the Prometheus Operator, checked against the
charts' own values.yaml and the operator's CRDs at the pinned versions (offline/schemas/)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import pytest
import yaml

from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.platform import versions
from ray_llm_eks.domain.platform.sizing import Resources
from ray_llm_eks.domain.platform.versions import ChartPin
from ray_llm_eks.domain.telemetry import monitoring_release, observability
from ray_llm_eks.domain.telemetry.observability import ObservabilitySettings, parse
from tests.conftest import ROOT

SCHEMAS = ROOT / "offline" / "schemas"
STACK_CHART = ChartPin(*versions.KUBE_PROMETHEUS_STACK_CHART, config_keys.default("kubePrometheusStackVersion"))
DCGM_CHART = ChartPin(*versions.DCGM_EXPORTER_CHART, config_keys.default("dcgmExporterVersion"))
EMBEDDED = ObservabilitySettings("embedded", stack_chart=STACK_CHART, dcgm_chart=DCGM_CHART)


def load(raw, existing_cluster: bool = False) -> ObservabilitySettings:
    return parse(raw, existing_cluster, STACK_CHART, DCGM_CHART)


# ---- the setting


def test_embedded_on_a_cluster_we_create_none_on_an_existing_one():
    assert load(None).mode == "embedded" and load({}).in_cluster_stack
    assert load(None, existing_cluster=True).mode == "none"
    assert load({"mode": "external"}, existing_cluster=True).prometheus_release == "kube-prometheus-stack"


@pytest.mark.parametrize(
    ("raw", "existing", "message"),
    [
        ("on", False, "invalid config ray-llm-eks:observability = 'on': a mapping with fields"),
        ({"mode": "grafana"}, False, "observability.mode = grafana: one of [embedded, amp, external, none]"),
        ({"mode": "embedded"}, True, "observability.mode = embedded: external or none on an existing cluster"),
        ({"mode": "amp"}, True, "observability.mode = amp: external or none on an existing cluster"),
        (
            {"retention": 15},
            False,
            "observability.retention = 15: not a field of observability; did you mean retentionDays?",
        ),
        ({"storageGiB": "20"}, False, "observability.storageGiB = '20': a whole number"),
        ({"mode": "amp", "storageGiB": 50}, False, "observability.storageGiB = 50: only with mode embedded"),
        ({"prometheusRelease": "prom"}, False, "observability.prometheusRelease = prom: only with mode external"),
        ({"grafanaIframeHost": "127.0.0.1:3000"}, False, "with http:// or https://"),
        ({"mode": "external", "prometheusNamespace": "Mon"}, True, "a namespace (DNS-1123 label)"),
    ],
)
def test_bad_values_are_refused_in_one_line(raw, existing, message):
    with pytest.raises(ConfigError) as caught:
        load(raw, existing)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_storage_must_hold_the_retention_at_the_series_budget():
    """100,000 series every 30 s at 2 bytes: 8.05 GiB for 15 days, which may fill 80% of the volume."""
    assert observability.storage_need_gib(15) == pytest.approx(100_000 / 30 * 15 * 86400 * 2 / 2**30)
    assert observability.retention_size_gib(load({"storageGiB": 11}).storage_gib) == 8
    with pytest.raises(
        ConfigError, match=r"storageGiB = 10: 11 to 16384 GiB: 15 days of 100,000 series at 30 s need 8.0"
    ):
        load({"storageGiB": 10})
    with pytest.raises(
        ConfigError, match=r"storageGiB = 20: 68 to 16384 GiB: 100 days of 100,000 series at 30 s need 53\.6 GiB"
    ):
        load({"retentionDays": 100})


# ---- what it takes from the nodes


def test_monitoring_pods_on_the_system_node_add_up():
    pods = monitoring_release.system_pods(EMBEDDED)
    assert sum(p.cpu_m for p in pods.values()) == 736 and sum(p.memory_mib for p in pods.values()) == 2294
    amp = monitoring_release.system_pods(ObservabilitySettings("amp"))
    assert set(amp) == {"prometheus", "prometheus-operator", "kube-state-metrics", "node-exporter"}
    assert monitoring_release.system_pods(ObservabilitySettings("external")) == {}
    assert monitoring_release.gpu_daemonsets(EMBEDDED) == {
        "node-exporter": Resources(102, 180),
        "dcgm-exporter": Resources(100, 128),
    }
    assert monitoring_release.gpu_daemonsets(ObservabilitySettings("none")) == {}


# ---- against the pinned Ray


def test_head_settings_are_the_names_ray_reads():
    """Ray 2.58's dashboard reads these names (metrics_head.py) and serves its metrics on these ports."""
    from ray.autoscaler._private.constants import AUTOSCALER_METRIC_PORT
    from ray.dashboard import consts
    from ray.dashboard.modules.metrics import metrics_head

    env = {e["name"]: e["value"] for e in observability.head_env(EMBEDDED)}
    assert set(env) == {
        metrics_head.GRAFANA_HOST_ENV_VAR,
        metrics_head.GRAFANA_IFRAME_HOST_ENV_VAR,
        metrics_head.PROMETHEUS_HOST_ENV_VAR,
        metrics_head.PROMETHEUS_NAME_ENV_VAR,
    }
    assert env["RAY_GRAFANA_HOST"] == "http://kube-prometheus-stack-grafana.monitoring.svc:80"
    assert env["RAY_PROMETHEUS_HOST"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert env["RAY_GRAFANA_IFRAME_HOST"] == "http://127.0.0.1:3000"
    assert env["RAY_PROMETHEUS_NAME"] == metrics_head.DEFAULT_PROMETHEUS_NAME == observability.DATASOURCE_NAME
    assert observability.head_ports(EMBEDDED) == {
        "as-metrics": AUTOSCALER_METRIC_PORT,
        "dash-metrics": consts.DASHBOARD_METRIC_PORT,
    }
    assert observability.head_env(ObservabilitySettings("amp")) == []  # no Grafana of ours to embed


# ---- against the charts' values.yaml


@functools.cache
def _parsed(path: Path) -> dict:
    """A vendored YAML file parsed once per session (with libyaml where PyYAML has it): the charts' values
    files are up to 200 KB, and several tests read each."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def chart_defaults(name: str) -> dict:
    """A chart's values.yaml at the pinned version (offline/schemas/charts/): a default version bumped
    without vendoring the new chart's values fails here, by the file's name."""
    return copy.deepcopy(_parsed(SCHEMAS / "charts" / f"{name}.values.yaml"))


# Maps the chart passes through whole: Grafana's INI file (grafana chart templates/configmap.yaml renders
# every section and key of `grafana.ini`).
FREE_FORM = {"grafana.grafana.ini"}


def unknown_keys(values: dict, defaults: dict, where: str = "") -> list[str]:
    """Key paths we set that the chart does not know. Below a default that is empty or not a mapping
    (a free-form map, a list, a passed-through object) anything goes."""
    found = []
    for key, value in values.items():
        path = f"{where}.{key}" if where else key
        if key not in defaults:
            found.append(path)
        elif isinstance(value, dict) and isinstance(defaults[key], dict) and defaults[key] and path not in FREE_FORM:
            found += unknown_keys(value, defaults[key], path)
    return found


def merged(base: dict, over: dict) -> dict:
    """Helm's merge of a parent chart's values over a subchart's defaults."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def stack_chart_defaults() -> dict:
    """kube-prometheus-stack's values with its subcharts' own under their keys (Chart.yaml dependencies)."""
    defaults = chart_defaults(f"kube-prometheus-stack-{STACK_CHART.version}")
    for key, chart in (
        ("grafana", "grafana-12.11.1"),
        ("kube-state-metrics", "kube-state-metrics-8.4.0"),
        ("prometheus-node-exporter", "prometheus-node-exporter-4.56.1"),
    ):
        defaults[key] = merged(chart_defaults(chart), defaults[key])
    return defaults


@pytest.mark.parametrize("mode", ["embedded", "amp"])
def test_every_stack_value_is_a_key_of_the_pinned_chart(mode):
    """Helm ignores a key it does not know, silently: every key we set is one of the chart's."""
    values = monitoring_release.stack_values(mode, 15, 20, False, "https://example/api/v1/remote_write", "us-east-1")
    assert unknown_keys(values, stack_chart_defaults()) == []
    broken = {"prometheus": {"prometheusSpec": {"nodeSelecter": {}}}}  # a typo is caught
    assert unknown_keys(broken, stack_chart_defaults()) == ["prometheus.prometheusSpec.nodeSelecter"]


def test_dcgm_values_and_ebs_configuration_are_keys_of_their_charts():
    assert unknown_keys(monitoring_release.dcgm_values(), chart_defaults(f"dcgm-exporter-{DCGM_CHART.version}")) == []
    ebs = monitoring_release.ebs_csi_configuration("us-east-1")
    assert unknown_keys(ebs, chart_defaults("aws-ebs-csi-driver-2.64.0")) == []
    assert (
        chart_defaults("aws-ebs-csi-driver-2.64.0")["controller"]["serviceAccount"]["name"] == "ebs-csi-controller-sa"
    )


def test_chart_defaults_we_rely_on():
    """What the code assumes of the charts' defaults, read from them."""
    stack = stack_chart_defaults()
    sidecar = stack["grafana"]["sidecar"]
    assert (sidecar["dashboards"]["label"], sidecar["dashboards"]["labelValue"]) == ("grafana_dashboard", "1")
    assert sidecar["dashboards"]["searchNamespace"] == "ALL"  # our ConfigMaps live in the RayService's namespace
    assert (sidecar["datasources"]["name"], sidecar["datasources"]["uid"]) == ("Prometheus", "prometheus")
    spec = stack["prometheus"]["prometheusSpec"]
    for kind in ("podMonitor", "serviceMonitor", "rule"):
        assert spec[f"{kind}SelectorNilUsesHelmValues"] is True  # hence our `release` label
        assert spec[f"{kind}NamespaceSelector"] == {}  # every namespace
    assert "adminPassword" not in stack["grafana"]  # unset: the chart generates one in a Secret, never in our state
    assert stack["grafana"]["service"]["port"] == observability.GRAFANA_PORT
    assert stack["grafana"]["service"]["targetPort"] == observability.GRAFANA_CONTAINER_PORT  # its NetworkPolicy
    assert stack["prometheus-node-exporter"]["tolerations"] == [{"effect": "NoSchedule", "operator": "Exists"}]
    assert stack["prometheus"]["prometheusSpec"]["image"]["tag"] == "v3.14.0-distroless"
    dcgm = chart_defaults(f"dcgm-exporter-{DCGM_CHART.version}")
    assert dcgm["resources"]["requests"] == monitoring_release.DCGM_EXPORTER_REQUESTS.as_k8s() | {"cpu": "100m"}
    assert dcgm["image"]["tag"] == "4.5.3-4.8.2-distroless"


# ---- against the Prometheus Operator's CRDs (v0.93.0, what the chart's v0.93.1 operator serves)


def crd_validator(plural: str) -> jsonschema.Draft7Validator:
    crd = _parsed(SCHEMAS / f"monitoring.coreos.com_{plural}.v0.93.0.yaml")
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(v1["schema"]["openAPIV3Schema"])


def test_monitors_and_rule_validate_against_the_crds():
    objects = [
        *monitoring_release.pod_monitors(observability.RELEASE, "llm"),
        monitoring_release.kuberay_service_monitor(observability.RELEASE, "kuberay-system"),
        monitoring_release.prometheus_rule(
            observability.RELEASE, "llm", {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "1"}]}]}
        ),
    ]
    plural = {"PodMonitor": "podmonitors", "ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}
    for obj in objects:
        errors = list(crd_validator(plural[obj["kind"]]).iter_errors(obj))
        assert errors == [], (obj["metadata"]["name"], [e.message for e in errors])
    broken = monitoring_release.pod_monitors(observability.RELEASE, "llm")[0]
    broken["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "rename"
    assert list(crd_validator("podmonitors").iter_errors(broken))


def test_pod_monitors_watch_head_and_workers_on_their_metrics_ports():
    head, workers = monitoring_release.pod_monitors(observability.RELEASE, "llm")
    assert head["spec"]["selector"] == {"matchLabels": {"ray.io/node-type": "head"}}
    assert [e["port"] for e in head["spec"]["podMetricsEndpoints"]] == ["metrics", "as-metrics", "dash-metrics"]
    assert workers["spec"]["selector"] == {"matchLabels": {"ray.io/node-type": "worker"}}
    assert [e["port"] for e in workers["spec"]["podMetricsEndpoints"]] == ["metrics"]
    for monitor in (head, workers):
        assert monitor["metadata"] == {
            "name": monitor["metadata"]["name"],
            "namespace": "llm",
            "labels": {"release": "kube-prometheus-stack"},
        }
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["relabelings"][0]["targetLabel"] == "ray_io_cluster"
    assert observability.metrics_ports(EMBEDDED) == [8080, 44217, 44227]
