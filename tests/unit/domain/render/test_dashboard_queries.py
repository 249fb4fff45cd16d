"""Every panel query of the shipped dashboards as Prometheus gets it: Grafana's variables substituted the way
Grafana does with its default selections (ray_llm_eks/domain/render/dashboards.py panel_queries)."""

from __future__ import annotations

import json
import re

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render import dashboards
from tests.conftest import ROOT
from tools import exported_metrics


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict]:
    """dev's dashboards with selectivePd on: every panel a PD stack can ship."""
    settings = stack.load_settings(stack.stack_file("dev", ROOT, overrides={"ray-llm-eks:selectivePd": "1024"}))
    return {name: json.loads(text) for name, text in dashboards.shipped_dashboards(settings).items()}


def test_no_variable_is_left_in_any_query(shipped):
    queries = [q for name, board in shipped.items() for q in dashboards.panel_queries(name, board, "2m")]
    assert len(queries) > 200
    assert [q for q in queries if "$" in q.expr or "[[" in q.expr] == []


def test_all_means_what_grafana_sends():
    board = {
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource"},
                {"name": "Cluster", "type": "query", "includeAll": True, "allValue": ".*"},
                {
                    "name": "RayNodeType",
                    "type": "custom",
                    "includeAll": True,
                    "current": {"value": ["$__all"]},
                    "options": [{"value": "$__all"}, {"value": "head"}, {"value": "worker"}],
                },
                {"name": "interval", "type": "custom", "current": {"value": "5m"}},
            ]
        },
        "panels": [
            {
                "title": "row",
                "panels": [
                    {
                        "title": "p",
                        "targets": [
                            {
                                "refId": "A",
                                "expr": 'rate(x{c=~"$Cluster", t=~"${RayNodeType}"}[$interval]) '
                                "+ rate(y[$__rate_interval])",
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (q,) = dashboards.panel_queries("b.json", board, "2m")
    assert q.expr == 'rate(x{c=~".*", t=~"(head|worker)"}[5m]) + rate(y[2m])'
    assert (q.dashboard, q.panel, q.ref) == ("b.json", "p", "A")


# A metric name in a query: not a label (ray_io_cluster) and not part of a regular expression (ray_serve_(http|...)).
# ray_selective_pd_: ours (ray_llm_eks/serve_ingress/selective_pd.py), listed from its declaration like the others.
_ENGINE_OR_SERVE = re.compile(r"\bray_(?:vllm|serve|selective_pd)_[a-zA-Z0-9_]*\b(?![.*(])")


def unexported(boards: dict[str, dict], names: set[str]) -> list[tuple[str, str, str]]:
    return [
        (q.dashboard, q.panel, metric)
        for name, board in boards.items()
        for q in dashboards.panel_queries(name, board)
        for metric in _ENGINE_OR_SERVE.findall(q.expr)
        if not exported_metrics.exported(metric, names)
    ]


def test_every_panel_queries_an_engine_or_serve_metric_the_pinned_vllm_and_ray_export(shipped):
    """ray_llm_eks/observability/exported-metrics.txt is derived from the pinned sources (`make check-upstream`
    re-derives it)."""
    names = exported_metrics.read_list()
    assert unexported(shipped, names) == []
    assert (
        len(
            {
                m
                for b in shipped.values()
                for q in dashboards.panel_queries("", b)
                for m in _ENGINE_OR_SERVE.findall(q.expr)
            }
        )
        > 60
    )


def test_a_panel_of_a_metric_nobody_exports_is_named():
    board = {
        "panels": [
            {"title": "Scheduler: Swapped", "targets": [{"refId": "A", "expr": "ray_vllm_num_requests_swapped"}]}
        ]
    }
    assert unexported({"b.json": board}, exported_metrics.read_list()) == [
        ("b.json", "Scheduler: Swapped", "ray_vllm_num_requests_swapped")
    ]


VLLM_LIKE = {
    "names.py": 'class Names:\n    LOAD = "vllm:load_bytes"\n    SIZE = "vllm:load_size"\n',
    "logger.py": (
        "class Logger:\n"
        "    def __init__(self):\n"
        '        self._gauge_cls(name="vllm:num_requests_running", documentation="")\n'
        '        self._counter_cls(name="vllm:num_preemptions", documentation="")\n'
        '        self._histogram_cls(name="vllm:time_to_first_token_seconds", buckets=[1])\n'
        '        for name, doc in (("vllm:spec_decode_num_drafts", "d"), ("vllm:spec_decode_num_draft_tokens", "t")):\n'
        "            self._counter_cls(name=name, documentation=doc)\n"
        "        defs = {Names.LOAD: OffloadingCounterMetadata(documentation='')}\n"
        "        defs[Names.SIZE] = OffloadingHistogramMetadata(documentation='')\n"
    ),
}


def test_names_and_kinds_come_from_the_declarations():
    """The shapes vLLM 0.26 declares its metrics in (tools/exported_metrics.py), and Serve's f-string names."""
    assert exported_metrics.declared(VLLM_LIKE, "vllm:") == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:spec_decode_num_drafts": "counter",
        "vllm:spec_decode_num_draft_tokens": "counter",
        "vllm:load_bytes": "counter",
        "vllm:load_size": "histogram",
    }
    serve = {
        "m.py": 'metrics.Counter(f"serve_num_{protocol}_requests")\nmetrics.Gauge("serve_replica_processing_queries")\n'
    }
    names = exported_metrics.prometheus_names(
        exported_metrics.declared(VLLM_LIKE, "vllm:"), exported_metrics.declared(serve, "serve_")
    )
    assert "ray_vllm_num_preemptions_total" in names and "ray_vllm_num_preemptions" not in names
    assert {"ray_vllm_load_size_bucket", "ray_vllm_load_size_sum", "ray_vllm_load_size_count"} <= set(names)
    assert "ray_vllm_num_requests_running" in names and "ray_serve_replica_processing_queries" in names
    assert exported_metrics.exported("ray_serve_num_grpc_requests_total", names)


def test_our_own_metrics_are_listed_from_their_declarations_in_serve_ingress():
    """ray_llm_eks/serve_ingress/'s metrics are in the list as tools/exported_metrics.py reads them (a renamed one is
    not)."""
    own = exported_metrics.prometheus_names(exported_metrics.declared(exported_metrics.own_sources(), ""))
    assert own == ["ray_selective_pd_prompt_tokens_total", "ray_selective_pd_requests_total"]
    assert set(own) <= exported_metrics.read_list()
    renamed = {
        "m.py": 'from ray.serve import metrics\nNAME = "selective_pd_calls"\nmetrics.Counter(NAME, tag_keys=())\n'
    }
    assert exported_metrics.prometheus_names(exported_metrics.declared(renamed, "")) == ["ray_selective_pd_calls_total"]


def test_every_alert_rule_reads_a_metric_that_is_exported():
    from ray_llm_eks.domain.telemetry import alerts

    spec = alerts.render(
        alerts.RuleInputs(pd=True, namespace="ray", service_name="llm", kv_floor_bytes_per_s=1e9, local_prefill_below=1)
    )
    exprs = [r["expr"] for g in spec["groups"] for r in g["rules"]]
    names = exported_metrics.read_list()
    used = {metric for e in exprs for metric in _ENGINE_OR_SERVE.findall(e)}
    assert "ray_selective_pd_prompt_tokens_total" in used
    assert [m for m in sorted(used) if not exported_metrics.exported(m, names)] == []
