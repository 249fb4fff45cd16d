"""What the program declares is the one builder's RayService, for every stack file."""

from __future__ import annotations

import pytest

from adapters import stack
from domain.ray_service import ray_service_spec
from tests.conftest import STACKS

RAY_SERVICE = "kubernetes:ray.io/v1:RayService"


@pytest.mark.parametrize("name", STACKS)
def test_the_program_deploys_exactly_the_one_builders_spec(plans, name):
    settings = stack.load_settings(stack.stack_file(name))
    assert plans[name].one(RAY_SERVICE).inputs["spec"] == ray_service_spec(settings)
