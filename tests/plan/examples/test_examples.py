"""examples/: the package's consumers, planned under the same mocks as the shipped program."""

from __future__ import annotations

from offline.plan import run_program
from tests.conftest import ROOT

MY_CLUSTER = ROOT / "examples" / "pd-service-on-my-cluster"


def test_the_pd_service_on_my_cluster_declares_the_operator_and_the_service_and_nothing_on_aws():
    plan = run_program("example", root=MY_CLUSTER)
    types = {r.type for r in plan.registrations}
    assert {"ray-llm-eks:kuberay:KubeRayOperator", "ray-llm-eks:llm_service:LlmService"} <= types
    assert not {t for t in types if t.startswith(("aws:", "eks:"))}
    service = plan.one("kubernetes:ray.io/v1:RayService")
    groups = [g["groupName"] for g in service.inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]]
    assert groups == ["prefill", "decode"]
    assert service.provider.startswith(plan.one("pulumi:providers:kubernetes", "my-cluster").urn)  # on my cluster
    assert plan.outputs["openaiBaseUrl"] == "http://llm-serve-svc.llm.svc.cluster.local:8000/v1"
