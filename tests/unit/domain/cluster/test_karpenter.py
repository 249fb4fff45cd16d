"""Karpenter's objects for our GPU pools (ray_llm_eks/domain/render/karpenter.py), validated against the pinned
Karpenter CRDs (offline/schemas/karpenter.*.v1.14.1.yaml) and checked against what our pods select,
tolerate and request. The CRDs' CEL rules (x-kubernetes-validations) are not evaluated here: only an
API server does that."""

from __future__ import annotations

from dataclasses import replace

import jsonschema
import pytest
import yaml

from ray_llm_eks.domain.core.facts import EFA_RESOURCE, GPU_RESOURCE, POOL_NODE_LABEL
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.placement import GPU_TAINT, ZONE_LABEL
from ray_llm_eks.domain.render import karpenter
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from tests.conftest import ROOT, settings_error, settings_of

SCHEMAS = ROOT / "offline" / "schemas"
NS = "ray-llm-eks:"
KWOK = karpenter.NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")


def crd_validator(name: str) -> jsonschema.Draft7Validator:
    crd = yaml.load((SCHEMAS / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(v1["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def node_pool_schema() -> jsonschema.Draft7Validator:
    return crd_validator("karpenter.sh_nodepools.v1.14.1.yaml")


@pytest.fixture(scope="module")
def node_class_schema() -> jsonschema.Draft7Validator:
    return crd_validator("karpenter.k8s.aws_ec2nodeclasses.v1.14.1.yaml")


@pytest.fixture(scope="module")
def pools():
    dev, baseline = settings_of(), settings_of(stack="baseline")
    return {**dev.gpu_pools, **baseline.gpu_pools}


def node_class(pool) -> dict:
    return karpenter.ec2_node_class(
        pool,
        node_role="dev-node-role",
        subnet_tags={"Name": "dev-private-us-east-1a"},
        security_group_tags={"aws:eks:cluster-name": "dev"},
        placement_group="dev-prefill" if pool.efa else None,
    )


def errors(validator: jsonschema.Draft7Validator, manifest: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]


@pytest.mark.parametrize("role", ["prefill", "decode", "collocated"])
def test_every_role_s_objects_validate_against_the_pinned_crds(role, pools, node_pool_schema, node_class_schema):
    pool = pools[role]
    for ref in (karpenter.ec2_node_class_ref(pool), KWOK):
        assert errors(node_pool_schema, karpenter.node_pool(pool, ref, spot=role == "prefill")) == []
    assert errors(node_class_schema, node_class(pool)) == []


def test_a_broken_field_fails_the_crd(pools, node_pool_schema, node_class_schema):
    """The validation sees what we build: a wrong enum, a wrong pattern and a missing required field."""
    pool = pools["prefill"]
    manifest = karpenter.node_pool(pool, karpenter.ec2_node_class_ref(pool))
    manifest["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    assert any("consolidationPolicy" in e for e in errors(node_pool_schema, manifest))
    manifest = node_class(pool)
    manifest["spec"]["networkInterfaces"][1]["interfaceType"] = "efa"
    assert any("interfaceType" in e for e in errors(node_class_schema, manifest))
    del manifest["spec"]["subnetSelectorTerms"]
    assert any("subnetSelectorTerms" in e for e in errors(node_class_schema, manifest))


def test_node_pools_make_the_nodes_our_worker_pods_select_tolerate_and_fill(pools):
    settings = settings_of()
    groups = {g["groupName"]: g for g in ray_service_spec(settings)["rayClusterConfig"]["workerGroupSpecs"]}
    for name, pool in settings.gpu_pools.items():
        template = karpenter.node_pool(pool, KWOK)["spec"]["template"]
        pod = groups[name]["template"]["spec"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in pod["nodeSelector"].items()), (labels, pod["nodeSelector"])
        (toleration,) = pod["tolerations"]
        assert [(t["key"], t["value"], t["effect"]) for t in template["spec"]["taints"]] == [
            (toleration["key"], toleration["value"], toleration["effect"])
        ]
        assert template["spec"]["taints"][0]["key"] == GPU_TAINT["key"]
        assert template["spec"]["nodeClassRef"] == {"group": KWOK.group, "kind": KWOK.kind, "name": KWOK.name}
        limits = pod["containers"][0]["resources"]["limits"]
        # EFA devices Karpenter counts on the node: the EFA-only interfaces of its node class.
        interfaces = node_class(pool)["spec"].get("networkInterfaces", [])
        assert sum(i["interfaceType"] == "efa-only" for i in interfaces) == int(limits.get(EFA_RESOURCE, 0))
        assert labels[POOL_NODE_LABEL] == name


def test_instance_types_fit_the_pool_and_its_role(pools):
    assert karpenter.fitting_instance_types(pools["prefill"]) == ["g6.16xlarge", "g6.8xlarge"]
    # A pool that needs no EFA (collocated) on a small L4 type: every single-L4 type with its room.
    small = replace(pools["collocated"].nodes, instance_type="g6.2xlarge")
    collocated = replace(pools["collocated"], nodes=small, spec=aws_facts.INSTANCE_SPECS["g6.2xlarge"])
    assert karpenter.fitting_instance_types(collocated) == ["g6.16xlarge", "g6.2xlarge", "g6.4xlarge", "g6.8xlarge"]
    # The same type for a PD role: only the EFA-capable ones.
    assert karpenter.fitting_instance_types(replace(collocated, serves="decode")) == ["g6.16xlarge", "g6.8xlarge"]


def test_limits_capacity_and_disruption_follow_the_pool(pools):
    pool = pools["decode"]
    spec = karpenter.node_pool(pool, KWOK)["spec"]
    assert spec["limits"] == {GPU_RESOURCE: str(pool.nodes.max_size * pool.spec.gpus)}
    requirements = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert requirements[karpenter.CAPACITY_TYPE_LABEL] == ["on-demand"]
    assert requirements[ZONE_LABEL] == [pool.availability_zone]
    spot = karpenter.node_pool(pools["prefill"], KWOK, spot=True)["spec"]["template"]["spec"]["requirements"]
    assert {r["key"]: r["values"] for r in spot}[karpenter.CAPACITY_TYPE_LABEL] == ["spot", "on-demand"]
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"


def test_node_classes_pin_the_ami_and_carry_efa_and_the_placement_group_on_pd_pools(pools):
    prefill = node_class(pools["prefill"])["spec"]
    assert prefill["amiSelectorTerms"] == [{"alias": f"al2023@{pools['prefill'].ami.release_version}"}]
    assert prefill["instanceStorePolicy"] == "RAID0"
    assert prefill["placementGroupSelector"] == {"name": "dev-prefill"}
    assert prefill["networkInterfaces"][0] == {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    collocated = node_class(pools["collocated"])["spec"]
    assert "networkInterfaces" not in collocated and "placementGroupSelector" not in collocated


def test_several_network_cards_get_one_efa_interface_each():
    spec = karpenter.aws_facts.INSTANCE_SPECS["p5.48xlarge"]
    interfaces = karpenter.network_interfaces(spec)
    efa = [(i["networkCardIndex"], i["deviceIndex"]) for i in interfaces if i["interfaceType"] == "efa-only"]
    assert efa == [(0, 1), *((card, 0) for card in range(1, spec.network_cards))]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"nodeProvisioning": "karpenterr"},
            "nodeProvisioning = karpenterr: one of [managedNodeGroups, karpenter, autoMode]",
        ),
        ({"nodeProvisioning": "autoMode"}, "managedNodeGroups or karpenter for a stack with PD pools"),
        ({"prefillSpot": True}, "prefillSpot = 'true': only with nodeProvisioning: karpenter"),
        ({"nodeProvisioning": "karpenter", "karpenterVersion": "^1.14"}, "karpenterVersion"),
        ({"nodeProvisioning": "karpenter", "clusterName": "c" * 81}, "at most 80 characters with nodeProvisioning"),
    ],
)
def test_node_provisioning_keys_are_checked_in_one_line(overrides, message):
    error = settings_error({NS + k: v for k, v in overrides.items()})
    assert message in str(error) and "\n" not in str(error), str(error)


def test_an_existing_cluster_takes_no_node_provisioning():
    error = settings_error({NS + "nodeProvisioning": "karpenter", NS + "existingCluster": True})
    assert "nodeProvisioning = karpenter: managedNodeGroups or unset with existingCluster" in str(error), str(error)


def test_karpenter_is_read_with_its_chart_and_spot_for_prefill():
    chosen = settings_of({NS + "nodeProvisioning": "karpenter", NS + "prefillSpot": True}).node_provisioning
    assert chosen.by_karpenter and chosen.prefill_spot
    assert (chosen.karpenter.repo, chosen.karpenter.chart, chosen.karpenter.version) == (
        "oci://public.ecr.aws/karpenter",
        "karpenter",
        "1.14.1",
    )
    assert settings_of().node_provisioning.karpenter is None


def test_the_controllers_values_are_keys_of_the_pinned_chart():
    """Every value we set is one the chart at karpenterVersion has (offline/schemas/charts/)."""
    from ray_llm_eks.components.karpenter import chart_values
    from ray_llm_eks.domain.core.config_keys import default
    from tests.unit.domain.telemetry.test_observability_settings import chart_defaults, unknown_keys

    values = chart_values("dev", "dev", 2)
    # A free-form map: Helm merges our pool label into the chart's kubernetes.io/os selector.
    assert set(values.pop("nodeSelector")) == {POOL_NODE_LABEL}
    assert unknown_keys(values, chart_defaults(f"karpenter-{default('karpenterVersion')}")) == []
    assert unknown_keys({"settings": {"interruptionQueueName": "dev"}}, chart_defaults("karpenter-1.14.1")) == [
        "settings.interruptionQueueName"
    ]
