"""What the program declares is the one builder's RayService, for every stack file."""

from __future__ import annotations

import pytest

from offline.mocks import placeholder
from ray_llm_eks.adapters import registry, stack
from ray_llm_eks.domain.cluster import gcs_ft
from ray_llm_eks.domain.render.ray_service import ray_service_spec
from tests.conftest import ROOT, STACKS

RAY_SERVICE = "kubernetes:ray.io/v1:RayService"


@pytest.mark.parametrize("name", STACKS)
def test_the_program_deploys_exactly_the_one_builders_spec(plans, name):
    # The image as the program pins it offline (ray_llm_eks/adapters/registry.py: the digest placeholder).
    settings = registry.with_pinned_image(stack.load_settings(stack.stack_file(name, ROOT)), deploying=False)
    # With GCS fault tolerance through Redis, the address is the store's, known once AWS made it.
    endpoint = placeholder("aws:elasticache/replicationGroup:ReplicationGroup::gcs-store-valkey.primaryEndpointAddress")
    address = gcs_ft.redis_address(endpoint) if settings.gcs_ft.redis else gcs_ft.ADDRESS_PLACEHOLDER
    assert plans[name].one(RAY_SERVICE).inputs["spec"] == ray_service_spec(settings, address)
