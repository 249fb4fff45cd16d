"""No resource of a shipped stack is deleted and created again by a change of code: every URN recorded in
offline/urns/ is still declared, or aliased (offline/urns.py)."""

from __future__ import annotations

import pulumi
import pytest

from offline import urns


def test_every_shipped_stack_keeps_its_recorded_urns(plans):
    for stack, plan in plans.items():
        record = f"python -m offline.urns --stack {stack} --write"
        assert urns.recorded(stack), f"offline/urns/{stack}.txt is missing: {record}"
        assert urns.gone(plan) == [], f"stack {stack}: pulumi up would delete these (add aliases=, or record anew)"


def test_a_resource_renamed_without_an_alias_is_gone(plans, tmp_path):
    plan = plans["dev"]
    kept = sorted(plan.by_urn)
    (tmp_path / "dev.txt").write_text("".join(f"{u}\n" for u in kept))
    assert urns.gone(plan, tmp_path) == []
    renamed = kept[0].rsplit("::", 1)[0] + "::renamed-since"
    (tmp_path / "dev.txt").write_text("".join(f"{u}\n" for u in [*kept, renamed]))
    assert urns.gone(plan, tmp_path) == [renamed]


class _Old(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:moved:Holder", name, None, opts)
        pulumi.CustomResource("aws:s3/bucket:Bucket", f"{name}-bucket", {}, pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


def _recorded_run(alias: pulumi.Alias | None):
    """A component given a new type token, with or without an alias to its old one, under the plan's mocks."""
    from offline.mocks import PlanMocks, RecordingMonitor
    from offline.plan import Plan

    monitor = RecordingMonitor(PlanMocks())
    pulumi.runtime.set_mocks(monitor.mocks, project="ray-llm-eks", stack="dev", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program():
        _Old("holder", pulumi.ResourceOptions(aliases=[alias] if alias else None))
        return pulumi.Output.from_input(None)

    program()
    return Plan("dev", monitor.registrations)


@pytest.mark.parametrize("aliased", [True, False])
def test_an_alias_answers_for_the_old_urn_and_its_childrens(aliased):
    old_type = "ray-llm-eks:old:Holder"
    plan = _recorded_run(pulumi.Alias(type_=old_type) if aliased else None)
    old_holder = f"urn:pulumi:dev::ray-llm-eks::{old_type}::holder"
    old_bucket = f"urn:pulumi:dev::ray-llm-eks::{old_type}$aws:s3/bucket:Bucket::holder-bucket"
    holder = plan.one("ray-llm-eks:moved:Holder")
    assert holder.urn == "urn:pulumi:dev::ray-llm-eks::ray-llm-eks:moved:Holder::holder"  # the engine's URN
    assert holder.options.get("aliases", []) == ([old_holder] if aliased else [])  # as make plan records it
    assert ({old_holder, old_bucket} <= urns.answered(plan)) is aliased
