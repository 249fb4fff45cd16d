"""GCS fault tolerance (ray_llm_eks/domain/cluster/gcs_ft.py) and what a change does to a running service (upgrades.py),
called directly on the shipped stacks' settings."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import yaml

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.cluster import gcs_ft, upgrades
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.render.ray_service import ZONE_LABEL, ray_service_spec, replacement_paths
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dev_settings():
    return stack.load_settings(stack.stack_file("dev", ROOT))


@pytest.fixture(scope="module")
def prod_settings():
    return stack.load_settings(stack.stack_file("prod", ROOT))


def test_prod_gets_redis_and_dev_gets_none_and_says_why(dev_settings, prod_settings):
    assert prod_settings.gcs_ft.redis and not prod_settings.gcs_ft.set_by_stack
    options = ray_service_spec(prod_settings)["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert options["backend"] == "redis"
    assert options["redisAddress"].startswith("rediss://")  # TLS: Ray 2.58 services.py get_address
    # The password only by reference to the Secret, never as a value.
    assert options["redisPassword"] == {
        "valueFrom": {"secretKeyRef": {"name": gcs_ft.REDIS_SECRET, "key": gcs_ft.REDIS_SECRET_KEY}}
    }
    assert "gcsFaultToleranceOptions" not in ray_service_spec(dev_settings)["rayClusterConfig"]
    assert "environment dev" in gcs_ft.describe(dev_settings.gcs_ft, dev_settings.hardening.environment)


def test_rocksdb_keeps_the_head_in_the_gpu_zone_and_turns_the_alpha_gate_on(prod_settings):
    settings = replace(prod_settings, gcs_ft=replace(prod_settings.gcs_ft, backend="rocksdb"))
    cluster = ray_service_spec(settings)["rayClusterConfig"]
    assert cluster["gcsFaultToleranceOptions"] == {
        "backend": "rocksdb",
        "storage": {"storageClassName": "gp3", "size": gcs_ft.ROCKSDB_SIZE},
    }
    selector = cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"]
    assert selector[ZONE_LABEL] == prod_settings.network.gpu_availability_zone
    gates = gcs_ft.operator_feature_gates(settings.gcs_ft)
    assert {"name": gcs_ft.ROCKSDB_FEATURE_GATE, "enabled": True} in gates
    assert len(gates) == len(gcs_ft.CHART_FEATURE_GATES) + 1  # the chart's own gates restated
    assert gcs_ft.operator_feature_gates(prod_settings.gcs_ft) is None  # redis: the chart's defaults untouched
    assert "ALPHA" in gcs_ft.describe(settings.gcs_ft, "production")


def test_the_ft_options_replace_the_ray_service_under_strategy_none(prod_settings):
    # The backend is immutable on a RayCluster and KubeRay applies no cluster change to a running one.
    assert any(p.startswith("spec.rayClusterConfig.gcsFaultToleranceOptions") for p in
               replacement_paths(ray_service_spec(prod_settings)))  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "node_type", "replicas", "key"),
    [("memory", "cache.t4g.small", 1, "gcsFaultTolerance"), ("redis", "t4g.small", 1, "gcsRedisNodeType"),
     ("redis", "cache.t4g.small", 9, "gcsRedisReplicas")],
)  # fmt: skip
def test_bad_values_fail_in_one_line_naming_the_key(backend, node_type, replicas, key):
    with pytest.raises(ConfigError) as err:
        gcs_ft.parse(backend, node_type, replicas, "production")
    assert key in str(err.value) and "\n" not in str(err.value)


def test_existing_cluster_mode_turns_the_default_redis_off_and_refuses_an_asked_one(prod_settings):
    ft = prod_settings.gcs_ft
    off = gcs_ft.for_mode(ft, existing_cluster=True)
    assert not off.on and "existing-cluster" in gcs_ft.describe(off, "production")
    with pytest.raises(ConfigError, match="gcsFaultTolerance"):
        gcs_ft.for_mode(replace(ft, set_by_stack=True), existing_cluster=True)
    assert gcs_ft.for_mode(ft, existing_cluster=False) is ft


def test_settings_of_an_existing_cluster_stack_have_no_store_and_no_internal_endpoint():
    """The deploy mode is read with the other keys and applied once there (no caller patches Settings)."""
    existing = {"ray-llm-eks:existingCluster": True}
    settings = stack.load_settings(stack.stack_file("prod", ROOT, overrides=existing))
    assert settings.deploy_mode.existing_cluster and not settings.gcs_ft.on and settings.gcs_ft.existing_cluster
    assert not settings.hardening.internal_endpoint
    with pytest.raises(ConfigError, match="gcsFaultTolerance = redis: off or rocksdb in existing-cluster mode"):
        stack.load_settings(
            stack.stack_file("prod", ROOT, overrides={**existing, "ray-llm-eks:gcsFaultTolerance": "redis"})
        )


def test_new_cluster_is_refused_without_room_for_a_second_cluster():
    assert upgrades.strategy(None, {"prefill": (1, 1)}) == "None"
    assert upgrades.strategy("NewCluster", {"prefill": (1, 2), "decode": (2, 4)}) == "NewCluster"
    with pytest.raises(ConfigError, match="decode maxSize 3 < 2 x desiredSize 2"):
        upgrades.strategy("NewCluster", {"prefill": (1, 2), "decode": (2, 3)})
    with pytest.raises(ConfigError, match="upgradeStrategy"):
        upgrades.strategy("NewClusterWithIncrementalUpgrade", {})


def _resource(spec: dict, replace_paths: list[str]) -> dict:
    return {
        "urn": "urn:pulumi:dev::ray-llm-eks::x$kubernetes:ray.io/v1:RayService::llm-rayservice",
        "type": "kubernetes:ray.io/v1:RayService",
        "name": "llm-rayservice",
        "inputs": {"spec": spec, "metadata": {"annotations": {}}},
        "options": {"replaceOnChanges": replace_paths},
    }


def _changed(spec: dict, edit) -> dict:
    new = copy.deepcopy(spec)
    edit(new)
    return new


def test_impacts_name_what_each_change_does(dev_settings):
    spec = ray_service_spec(dev_settings)
    paths = replacement_paths(spec)
    old = [_resource(spec, paths)]

    def serve_edit(key, value):
        def edit(new):
            document = yaml.safe_load(new["serveConfigV2"])
            config = document["applications"][0]["args"]["decode_config"]
            config.setdefault("engine_kwargs" if key != "num_replicas" else "deployment_config", {})[key] = value
            new["serveConfigV2"] = yaml.safe_dump(document)

        return edit

    def kinds(edit, strategy_paths=paths):
        new_spec = _changed(spec, edit)
        return [i.kind for i in upgrades.impacts(old, [_resource(new_spec, strategy_paths)], yaml.safe_load)]

    assert kinds(serve_edit("num_replicas", 2)) == [upgrades.IN_PLACE]
    assert kinds(serve_edit("block_size", 32)) == [upgrades.ROLLING]
    image = lambda new: new["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(  # noqa: E731
        image="other:tag"
    )
    assert kinds(image) == [upgrades.REPLACED]
    # NewCluster: no replaceOnChanges (KubeRay makes the second cluster itself).
    new_cluster = lambda new: (image(new), new["upgradeStrategy"].update(type="NewCluster"))  # noqa: E731
    assert kinds(new_cluster, []) == [upgrades.NEW_CLUSTER]
    assert upgrades.impacts(old, old) == []


def test_node_group_changes_replace_nodes_unless_only_scaling():
    def group(**inputs):
        return {"urn": "u", "type": "eks:index:ManagedNodeGroup", "name": "decode", "inputs": inputs}

    old = [group(releaseVersion="v1", scalingConfig={"desiredSize": 1})]
    assert [i.kind for i in upgrades.impacts(old, [group(releaseVersion="v2", scalingConfig={"desiredSize": 1})])] == [
        upgrades.NODES
    ]
    assert [i.kind for i in upgrades.impacts(old, [group(releaseVersion="v1", scalingConfig={"desiredSize": 2})])] == [
        upgrades.IN_PLACE
    ]
    report = upgrades.report(upgrades.impacts(old, [group(releaseVersion="v2", scalingConfig={"desiredSize": 1})]))
    assert "[node replacement] decode: releaseVersion changed" in report
    json.dumps(report)


def test_a_region_change_replaces_every_resource_as_pulumi_aws_does():
    """A copy of a stack in another region (another stack name too): every resource of the one is replaced,
    what only one side names is created or deleted; never "updated" or "no effect on serving"."""

    def resource(stack, name, type_, **inputs):
        return {
            "urn": f"urn:pulumi:{stack}::ray-llm-eks::{type_}::{name}",
            "type": type_,
            "name": name,
            "inputs": inputs,
        }

    east = [
        resource("dev", "eks", "eks:index:Cluster", version="1.35"),
        resource("dev", "net-nat-us-east-1a", "aws:ec2/natGateway:NatGateway"),
    ]
    west = [
        resource("mine", "eks", "eks:index:Cluster", version="1.35"),
        resource("mine", "net-nat-us-west-2a", "aws:ec2/natGateway:NatGateway"),
    ]
    found = upgrades.impacts(east, west, regions=("us-east-1", "us-west-2"))
    assert {i.kind for i in found} == {upgrades.REGION}
    lines = [i.line for i in found]
    assert lines[0].startswith("aws:region us-east-1 -> us-west-2: every resource is replaced")
    assert "eks:index:Cluster replaced" in lines and "aws:ec2/natGateway:NatGateway created in us-west-2" in lines
    assert "aws:ec2/natGateway:NatGateway deleted from us-east-1" in lines
    # The same region under another stack name: the resources are the same ones, nothing changes.
    assert upgrades.impacts(east[:1], west[:1], regions=("us-east-1", "us-east-1")) == []
