"""Our dashboard, "the endpoint at a glance", rendered per stack, and the set of dashboards a stack ships.
Whether its queries answer on a real Prometheus is the rehearsal's check (rehearsal/checks/observability.py)."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render import dashboards
from ray_llm_eks.domain.telemetry import alerts
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dev_settings():
    return stack.load_settings(stack.stack_file("dev", ROOT))


def panels(board: dict) -> dict[str, dict]:
    return {p["title"]: p for p in board["panels"] if p["type"] != "row"}


def test_the_endpoint_at_a_glance_has_what_operators_of_pd_ask_for(dev_settings):
    board = dashboards.endpoint_dashboard(dashboards.endpoint_inputs(dev_settings))
    titles = set(panels(board))
    assert {
        "Time to first token",
        "Inter-token latency",
        "End-to-end latency",
        "KV transfer throughput",
        "KV transfer failures (since engine start)",
        "Decode prompt tokens by source",
        "Requests waiting",
        "KV cache in use",
        "Replicas per role",
        dashboards.LOOP_LAG_PANEL,
        "GPU utilisation per node",
        "GPU memory used per node",
        "Dollars per million output tokens",
    } <= titles
    ttft = panels(board)["Time to first token"]["targets"]
    assert [t["legendFormat"] for t in ttft] == ["{{role}} p50", "{{role}} p95", "{{role}} p99"]
    assert all(alerts.ENGINE_ROLE in t["expr"] for t in ttft)  # per role through the recording rule


def test_the_cost_per_token_uses_this_stacks_hourly_cost(dev_settings):
    inputs = dashboards.endpoint_inputs(dev_settings)
    assert inputs.usd_per_hour and inputs.usd_per_hour > 0
    (target,) = panels(dashboards.endpoint_dashboard(inputs))["Dollars per million output tokens"]["targets"]
    assert target["expr"].startswith(f"{inputs.usd_per_hour:.6g} / (")
    unknown = dashboards.EndpointInputs("x", True, None, 1e9)
    cost = panels(dashboards.endpoint_dashboard(unknown))["Dollars per million output tokens"]
    assert cost["targets"] == [] and "unknown" in cost["description"]


def test_a_collocated_stack_has_no_kv_transfer_panels():
    baseline = stack.load_settings(stack.stack_file("baseline", ROOT))
    titles = set(panels(dashboards.endpoint_dashboard(dashboards.endpoint_inputs(baseline))))
    assert "Time to first token" in titles
    assert not {t for t in titles if t.startswith(("KV transfer", "Decode prompt"))}


def test_panels_do_not_overlap_and_ids_are_unique(dev_settings):
    board = dashboards.endpoint_dashboard(dashboards.endpoint_inputs(dev_settings))
    cells = set()
    for p in board["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_a_stack_ships_rays_four_dashboards_and_ours_as_compact_json(dev_settings):
    shipped = dashboards.shipped_dashboards(dev_settings)
    assert sorted(shipped) == [
        "endpoint.json",
        "ray-default.json",
        "ray-serve-deployment.json",
        "ray-serve-llm.json",
        "ray-serve.json",
    ]
    llm = shipped["ray-serve-llm.json"]
    assert "\n" not in llm and json.loads(llm)["uid"] == "rayServeLlmDashboard"
    # A ConfigMap holds at most 1 MiB.
    assert max(len(v.encode()) for v in shipped.values()) < 1024 * 1024


def test_with_selective_pd_a_panel_shows_the_two_paths_and_the_share_that_skipped_prefill(dev_settings):
    assert dashboards.SELECTIVE_PD_PANEL not in panels(
        dashboards.endpoint_dashboard(dashboards.endpoint_inputs(dev_settings))
    )
    on = stack.load_settings(stack.stack_file("dev", ROOT, overrides={"ray-llm-eks:selectivePd": "1024"}))
    inputs = dashboards.endpoint_inputs(on)
    assert inputs.local_prefill_below == 1024
    panel = panels(dashboards.endpoint_dashboard(inputs))[dashboards.SELECTIVE_PD_PANEL]
    paths, share = panel["targets"]
    assert paths["expr"] == "sum by (path) (rate(ray_selective_pd_requests_total[$__rate_interval]))"
    assert paths["legendFormat"] == "{{path}}"
    assert share["expr"].startswith('sum(rate(ray_selective_pd_requests_total{path="local"}[$__rate_interval])) / ')
    assert "under 1024 tokens" in panel["description"]
