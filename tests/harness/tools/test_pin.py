"""`make pin` (tools/pin.py, ray_llm_eks/domain/platform/pins.py): the image's digest and the add-ons' versions
resolved once and kept, so a second `up` after the tag moved replaces nothing; outside dev an `up` without them
is refused."""

from __future__ import annotations

import pytest
import yaml

from offline.plan import run_program
from ray_llm_eks.adapters import registry
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.cluster import upgrades
from ray_llm_eks.domain.platform import pins
from tests.conftest import failing_run, settings_error, settings_of
from tools.pin import pins_to_set

NS = "ray-llm-eks:"
FIRST, MOVED = "sha256:" + "1a" * 32, "sha256:" + "2b" * 32
KEYS = {NS + "apiKeys": SecretValue("k" * 24)}
ADDON_VERSION = "v1.2.3-eksbuild.4"


def _default_version(addon: str, kubernetes: str) -> str:
    return ADDON_VERSION


def _overrides(found: list[tuple[str, str]]) -> dict:
    """What `pulumi config set --path` leaves in the stack file, as the program reads it."""
    values, addons = {}, {}
    for path, value in found:
        if path.startswith(pins.KEY):
            addons[path.split('"')[1]] = value
        else:
            values[NS + path] = value
    return {**values, **({NS + pins.KEY: addons} if addons else {})}


def test_pin_keeps_the_tags_digest_and_every_addon_and_nothing_twice():
    found = pins_to_set(settings_of(), None, lambda image: FIRST, _default_version)
    assert found[0] == ("dlcImageTag", f"serve-llm-cuda-v1.0.0@{FIRST}")
    assert found[1:] == [(f'{pins.KEY}["{name}"]', ADDON_VERSION) for name in pins.ADDONS]
    kept = settings_of(_overrides(found))
    assert kept.serving.image.endswith(f"ray:serve-llm-cuda-v1.0.0@{FIRST}")
    assert pins_to_set(kept, None, lambda image: MOVED, _default_version) == []  # the tag moved: kept
    again = pins_to_set(kept, None, lambda image: MOVED, _default_version, again=True)
    assert again[0] == ("dlcImageTag", f"serve-llm-cuda-v1.0.0@{MOVED}")  # AGAIN=1: the upgrade


def test_pin_adds_the_digest_to_an_image_of_your_own():
    own = {NS + "image": "registry.example.com/team/ray:2.58.0-a", NS + "rayVersion": "2.58.0"}
    found = pins_to_set(settings_of(own), own[NS + "image"], lambda image: FIRST, _default_version)
    assert found[0] == ("image", f"registry.example.com/team/ray:2.58.0-a@{FIRST}")


@pytest.fixture
def moving_tag(monkeypatch):
    """A registry whose tag names FIRST, then MOVED once `served[0]` is changed; every lookup counted."""
    served, asked = [FIRST], []

    def digest(reg, repository, tag):
        asked.append(tag)
        return served[0]

    monkeypatch.setattr(registry, "manifest_digest", digest)
    monkeypatch.setattr(registry, "ecr_credentials", lambda account: ("AWS", "password"))
    return served, asked


def _impacts(first, second) -> list[upgrades.Impact]:
    return upgrades.impacts(first.resources_json(), second.resources_json(), yaml.safe_load)


def test_a_second_up_after_the_tag_moved_replaces_nothing_once_pinned(moving_tag):
    served, asked = moving_tag
    found = pins_to_set(settings_of(), None, lambda image: served[0], _default_version)
    first = run_program("dev", {**KEYS, **_overrides(found)}, offline_plan=False)
    served[0] = MOVED  # the tag is pushed again
    second = run_program("dev", {**KEYS, **_overrides(found)}, offline_plan=False)
    assert asked == []  # no `up` asked the registry: the stack keeps the digest
    image = first.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert image["template"]["spec"]["containers"][0]["image"].endswith(FIRST)
    assert _impacts(first, second) == []
    assert not [w for w in second.warnings if "resolved at this deploy" in w]


def test_without_the_pin_a_moved_tag_replaces_the_rayservice_and_dev_is_told(moving_tag):
    """What the pin prevents: resolved at each `up`, the moved tag is a new cluster spec (delete first)."""
    served, _ = moving_tag
    first = run_program("dev", KEYS, offline_plan=False)
    served[0] = MOVED
    second = run_program("dev", KEYS, offline_plan=False)
    kinds = {(i.kind, i.resource) for i in _impacts(first, second)}
    assert (upgrades.REPLACED, "rayservice") in kinds
    assert [w for w in second.warnings if "resolved at this deploy" in w and "make pin STACK=<stack>" in w]


def test_an_up_outside_dev_without_the_pins_is_refused(moving_tag):
    # A real network's CIDR: a documentation range (prod's 203.0.113.0/24) is refused first at deploy.
    error, monitor = failing_run(
        {**KEYS, NS + "environment": "staging", NS + "endpointPublicAccessCidrs": ["8.8.4.0/24"]},
        offline_plan=False,
    )
    assert "pinned in the stack file in environment staging" in str(error)
    assert "make pin STACK=<stack>" in str(error)
    assert monitor.registrations == []


def test_a_bad_addon_version_or_name_is_one_line():
    error = settings_error({NS + pins.KEY: {"vpc-cni": "latest"}})
    assert "eksAddonVersions.vpc-cni = latest: an add-on version such as v1.19.2-eksbuild.1" in str(error)
    error = settings_error({NS + pins.KEY: {"cni": ADDON_VERSION}})
    assert "eksAddonVersions.cni = v1.2.3-eksbuild.4: an add-on the stack runs" in str(error)


def test_kept_addon_versions_reach_every_addon_in_the_plan():
    versions = {name: f"v1.0.{i}-eksbuild.1" for i, name in enumerate(pins.ADDONS)}
    plan = run_program("prod", {NS + pins.KEY: versions})
    cluster = plan.one("eks:index:Cluster").inputs
    assert cluster["vpcCniOptions"]["addonVersion"] == versions["vpc-cni"]
    assert cluster["kubeProxyAddonOptions"]["version"] == versions["kube-proxy"]
    assert cluster["corednsAddonOptions"]["version"] == versions["coredns"]
    addons = {r.inputs["addonName"]: r.inputs["addonVersion"] for r in plan.of_type("aws:eks/addon:Addon")}
    assert addons == {n: versions[n] for n in ("eks-pod-identity-agent", "aws-ebs-csi-driver")}
