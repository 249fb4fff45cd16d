"""Every panel query of the shipped dashboards as Prometheus gets it: Grafana's variables substituted the way
Grafana does with its default selections (domain/dashboards.py panel_queries)."""

from __future__ import annotations

import json

import pytest

from adapters import stack
from domain import dashboards


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict]:
    settings = stack.load_settings(stack.stack_file("dev"))
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
