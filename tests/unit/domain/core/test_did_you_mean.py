"""The "did you mean" hint of a one-line error: the closest name, every name equally close, or nothing."""

from ray_llm_eks.domain.core.errors import did_you_mean

REGIONS = ["eu-west-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2"]


def test_the_closest_name_alone():
    assert did_you_mean("eu-west1", REGIONS) == " did you mean eu-west-1?"


def test_names_equally_close_are_all_offered():
    assert did_you_mean("us-est-1", REGIONS) == " did you mean us-east-1 or us-west-1?"


def test_nothing_close_says_nothing():
    assert did_you_mean("mars-1", REGIONS) == ""


def test_a_mapping_compares_its_keys_and_shows_its_values():
    assert did_you_mean("modelID", {"modelId": "ray-llm-eks:modelId"}) == " did you mean ray-llm-eks:modelId?"
