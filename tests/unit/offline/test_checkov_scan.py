"""checkov's input and its justifications (offline/checkov_scan.py); `make policy` runs checkov itself."""

from __future__ import annotations

import pytest

from offline import checkov_scan

RAYSERVICE = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "metadata": {"name": "llm", "namespace": "llm"},
    "spec": {
        "rayClusterConfig": {
            "headGroupSpec": {
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "h"}]}}
            },
            "workerGroupSpecs": [
                {"groupName": "decode", "template": {"spec": {"containers": [{"name": "d"}]}}},
                {"groupName": "prefill", "template": {"spec": {"containers": [{"name": "p"}]}}},
            ],
        }
    },
}


def test_every_ray_pod_template_is_scanned_as_a_pod_and_helm_releases_as_their_rendered_charts():
    chart = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x-agent", "namespace": "demo"}}
    docs = checkov_scan.scanned(
        {"rs.yaml": RAYSERVICE, "h.yaml": {"kind": "HelmRelease", "name": "x"}}, {"chart--x--000.yaml": chart}
    )
    pods = {d["metadata"]["name"]: d for d in docs.values() if d["kind"] == "Pod"}
    assert sorted(pods) == ["llm-decode-worker", "llm-head", "llm-prefill-worker"]
    assert pods["llm-head"]["spec"]["containers"] == [{"name": "h"}]
    assert pods["llm-head"]["metadata"] == {"name": "llm-head", "namespace": "llm", "labels": {"a": "b"}}
    # The release itself is no object: its chart's objects stand in for it (offline/chart_render.py).
    assert "h.yaml" not in docs and "rs.yaml" in docs and docs["chart--x--000.yaml"] == chart


def test_a_failure_is_justified_only_by_its_check_on_a_matching_resource():
    skip = checkov_scan.Skip("CKV_K8S_16", ("Pod.*.*-worker",), "why")
    worker = checkov_scan.Failure("CKV_K8S_16", "privileged", "Pod.llm.llm-decode-worker")
    head = checkov_scan.Failure("CKV_K8S_16", "privileged", "Pod.llm.llm-head")
    other = checkov_scan.Failure("CKV_K8S_20", "escalation", "Pod.llm.llm-decode-worker")
    assert checkov_scan.unjustified([worker, head, other], [skip]) == [head, other]


def test_every_justification_is_one_line_and_docs_security_lists_them_all():
    skips = checkov_scan.load_skips()
    assert skips
    text = checkov_scan.DOCS_FILE.read_text()
    assert checkov_scan.docs_with_table(text, skips) == text, "docs/security.md is stale: run make docs"


def test_a_justification_without_its_why_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "skips.yaml"
    bad.write_text("- check: CKV_K8S_8\n  resources: ['Pod.*']\n  why: ''\n")
    with pytest.raises(ValueError, match=r"skips.yaml\[0\] why: '': allowed is one line of text"):
        checkov_scan.load_skips(bad)
