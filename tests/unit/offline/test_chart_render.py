"""The Helm charts in `make policy` (offline/chart_render.py, offline/policy_check.py checkov_check): a chart of
ours (tests/data/charts/checkov-fixture) rendered by the real helm with a release's values from the plan, scanned
by the real checkov, failing until a justification covers it; a chart that cannot be had is one line, not a
failure. helm is the e2e build's (go_binaries/build.py HELM_VERSION) or the PATH's, checkov the venv `make policy`
installs; without them those tests skip, saying so."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from offline import chart_render, checkov_scan, policy_check
from ray_llm_eks.adapters import environment
from tests.conftest import ROOT

CHARTS = ROOT / "tests" / "data" / "charts"
FIXTURE = "checkov-fixture"


def release(name: str, values: dict, chart: str = FIXTURE, version: str = "0.1.0", repo: str | None = None) -> dict:
    """A HelmRelease as offline/plan.py writes it."""
    return {
        "kind": "HelmRelease",
        "name": name,
        "namespace": "demo",
        "chart": chart,
        "repo": repo or "https://charts.example.invalid",
        "version": version,
        "values": values,
    }


def checkov() -> Path:
    """The checkov `make policy` runs: the Makefile's pinned-venv-dir of policy/checkov-requirements.txt."""
    reqs = ROOT / "policy" / "checkov-requirements.txt"
    digest = hashlib.sha256(reqs.read_bytes()).hexdigest()[:12]
    return environment.cache_dir() / f"checkov-venv-{digest}" / "bin" / "checkov"


HELM = chart_render.helm_binary()
needs_helm = pytest.mark.skipif(
    HELM is None, reason="no helm: `python3 -m go_binaries.build helm` builds it (or put one on PATH)"
)
needs_checkov = pytest.mark.skipif(
    not checkov().is_file(), reason=f"no checkov at {checkov()}: `make policy` installs it"
)


@pytest.fixture(autouse=True)
def _no_user_caches(tmp_path, monkeypatch):
    """Neither the user's helm cache nor the project's pull cache: only what each test names."""
    monkeypatch.setenv("HELM_REPOSITORY_CACHE", str(tmp_path / "helm-cache"))
    monkeypatch.setattr(chart_render, "pull_cache", lambda: tmp_path / "pulled")


def test_a_chart_is_found_by_its_chart_yaml_name_and_version():
    (fixture,) = chart_render.releases({"r.yaml": release("fix", {})})
    assert chart_render.find_archive(fixture, [CHARTS]) == CHARTS / FIXTURE
    (other,) = chart_render.releases({"r.yaml": release("fix", {}, version="0.2.0")})
    assert chart_render.find_archive(other, [CHARTS]) is None


def test_an_oci_chart_is_named_by_its_reference():
    (karpenter,) = chart_render.releases(
        {"k.yaml": release("karpenter", {}, chart="oci://public.ecr.aws/karpenter/karpenter", version="1.14.1")}
    )
    assert str(karpenter) == "chart karpenter 1.14.1 from oci://public.ecr.aws/karpenter"


def test_without_helm_each_chart_is_one_line_and_nothing_is_rendered(monkeypatch):
    monkeypatch.setattr(chart_render, "helm_binary", lambda: None)
    out = chart_render.rendered({"r.yaml": release("fix", {})}, CHARTS)
    assert out.docs == {}
    assert out.not_scanned == [
        "chart checkov-fixture 0.1.0 from https://charts.example.invalid: not scanned, no helm"
        " (`python3 -m go_binaries.build helm` builds it)"
    ]


def test_a_repository_that_refused_once_is_not_asked_again_in_the_same_run(monkeypatch):
    asked = []
    monkeypatch.setattr(chart_render, "pull", lambda helm, r, into: (asked.append(r.chart), (None, "no such host"))[1])
    two = {"a.yaml": release("a", {}, chart="one", version="1"), "b.yaml": release("b", {}, chart="two", version="1")}
    out = chart_render.rendered(two, CHARTS, helm=Path("helm"), allow_pull=True)
    assert asked == ["one"]
    assert [line.endswith("no such host)") for line in out.not_scanned] == [True, True]


def test_no_repository_is_asked_unless_pulls_are_allowed(monkeypatch):
    """A run without network (CI) must send nothing to a chart repository: pulls are opt-in (PULL_CHARTS=1)."""
    asked = []
    monkeypatch.setattr(chart_render, "pull", lambda helm, r, into: (asked.append(r.chart), (None, "refused"))[1])
    out = chart_render.rendered({"a.yaml": release("a", {}, chart="one", version="1")}, CHARTS, helm=Path("helm"))
    assert asked == []
    (line,) = out.not_scanned
    assert "archive not reachable" in line and "refused" not in line


@needs_helm
def test_a_chart_that_cannot_be_had_is_one_line_not_an_error():
    out = chart_render.rendered({"r.yaml": release("gone", {}, chart="nowhere", version="9.9.9")}, CHARTS)
    assert out.docs == {}
    (line,) = out.not_scanned
    head = "chart nowhere 9.9.9 from https://charts.example.invalid: not scanned, archive not reachable"
    assert line.startswith(head)


@needs_helm
def test_the_chart_is_rendered_with_the_plans_values_in_the_releases_namespace():
    out = chart_render.rendered({"r.yaml": release("fix", {"privileged": True})}, CHARTS, kube_version="1.35")
    assert out.not_scanned == []
    (deployment,) = out.docs.values()  # the fixture's `helm test` hook Pod left out
    assert deployment["metadata"] == {"name": "fix-agent", "namespace": "demo"}
    agent, helper = deployment["spec"]["template"]["spec"]["containers"]
    assert agent["securityContext"] == {"privileged": True} and "resources" not in helper


@needs_helm
@needs_checkov
def test_a_rendered_charts_failures_fail_the_scan_until_a_justification_covers_them(tmp_path):
    manifests = {"a.yaml": release("fix", {"privileged": True}), "b.yaml": release("calm", {})}
    empty = tmp_path / "none.yaml"
    empty.write_text("[]\n")
    result = policy_check.checkov_check(manifests, checkov(), CHARTS, "1.35", skips=empty, allow_pull=False)
    assert result.charts == 2 and result.not_scanned == []
    failed = {(f.check, f.resource) for f in result.unjustified}
    # The privileged container only where the release's values ask for it; the helper's missing resources in both.
    assert ("CKV_K8S_16", "Deployment.demo.fix-agent") in failed
    assert ("CKV_K8S_16", "Deployment.demo.calm-agent") not in failed
    assert {("CKV_K8S_11", "Deployment.demo.fix-agent"), ("CKV_K8S_11", "Deployment.demo.calm-agent")} <= failed
    justified = tmp_path / "skips.yaml"
    justified.write_text(
        "\n".join(
            f"- {{check: {check}, resources: ['*.demo.*'], why: fixture}}"
            for check in sorted({f.check for f in result.failures})
        )
    )
    assert checkov_scan.unjustified(result.failures, checkov_scan.load_skips(justified)) == []
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("- {check: CKV_K8S_16, resources: ['Deployment.demo.calm-*'], why: not the privileged one}\n")
    left = checkov_scan.unjustified(result.failures, checkov_scan.load_skips(narrow))
    assert ("CKV_K8S_16", "Deployment.demo.fix-agent") in {(f.check, f.resource) for f in left}
