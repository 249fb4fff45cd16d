"""Ray's dashboards as shipped are what the pinned Ray generates, with our named patches (tools/ray_dashboards.py)."""

from __future__ import annotations

import json
import re

import pytest

from ray_llm_eks.domain.render import dashboards
from tools import ray_dashboards


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return ray_dashboards.generate()


def test_committed_dashboards_are_what_the_pinned_ray_generates(generated):
    # A Ray bump that changes a dashboard fails here: regenerate with `.venv/bin/python -m tools.ray_dashboards`.
    committed = {p.name: p.read_text() for p in ray_dashboards.OUT.glob("ray-*.json")}
    assert sorted(generated) == sorted(committed)
    assert [name for name, text in generated.items() if committed[name] != text] == []


def test_overrides_in_the_environment_do_not_leak_into_the_files(monkeypatch, generated):
    monkeypatch.setenv("RAY_GRAFANA_SERVE_LLM_DASHBOARD_UID", "someone-elses")
    monkeypatch.setenv("RAY_GRAFANA_SERVE_LLM_DASHBOARD_GLOBAL_FILTERS", 'SessionName="x"')
    assert ray_dashboards.generate() == generated


def test_the_llm_dashboard_counts_nixl_failures_with_the_exported_counter_name(generated):
    llm = json.loads(generated["ray-serve-llm.json"])
    exprs = {
        p["title"]: [t["expr"] for t in p.get("targets", [])]
        for row in llm["panels"]
        for p in [row, *row.get("panels", [])]
    }
    (expr,) = exprs["NIXL: KV Transfer Failures"]
    assert "ray_vllm_nixl_num_failed_transfers_total{" in expr
    assert not re.search(r"ray_vllm_nixl_num_failed_transfers(?!_total)\b", generated["ray-serve-llm.json"])


def test_a_patch_that_no_longer_changes_anything_fails_by_name():
    patch = ray_dashboards.PATCHES[0]
    fixed_upstream = '{"expr": "increase(ray_vllm_nixl_num_failed_transfers_total[5m])"}'
    with pytest.raises(ray_dashboards.PatchStale, match=patch.name):
        ray_dashboards.apply_patches(patch.dashboard, fixed_upstream)


def test_the_patch_changes_only_the_bare_name():
    patch = ray_dashboards.PATCHES[0]
    text = "ray_vllm_nixl_num_failed_transfers{a} ray_vllm_nixl_num_failed_transfers_total{b}"
    assert ray_dashboards.apply_patches(patch.dashboard, text, (patch,)) == (
        "ray_vllm_nixl_num_failed_transfers_total{a} ray_vllm_nixl_num_failed_transfers_total{b}"
    )


def test_the_llm_dashboards_swapped_panel_shows_preemptions_vllm_v1_exports(generated):
    board = json.loads(generated["ray-serve-llm.json"])
    (panel,) = [q for q in dashboards.panel_queries("ray-serve-llm.json", board) if "Preemptions" in q.panel]
    assert panel.panel == "Scheduler: Preemptions/s"
    assert "sum by(WorkerId) (rate(ray_vllm_num_preemptions_total{" in panel.expr
    assert "swapped" not in generated["ray-serve-llm.json"].lower()


def test_check_mode_names_a_stale_file(tmp_path, monkeypatch, capsys, generated):
    for name, text in generated.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(ray_dashboards, "OUT", tmp_path)
    monkeypatch.setattr(ray_dashboards, "ROOT", tmp_path.parent)
    assert ray_dashboards.main(["--check"]) == 0
    (tmp_path / "ray-serve.json").write_text("{}\n")
    assert ray_dashboards.main(["--check"]) == 1
    assert "ray-serve.json differs" in capsys.readouterr().err
